"""The request bodies of the worker protocol (W2-W4): hello, claim, start, result and
report-and-claim, built from the same checks as every other body (``validation``)."""

from __future__ import annotations

from orbit_shell.validation import (
    BATCH_MAX,
    AnyJson,
    Boolean,
    Enum,
    Field,
    Hex32,
    Integer,
    ListOf,
    Object,
    Shape,
    Text,
)

WORKER_HELLO = Shape(
    {
        "worker_id": Field(Text(1, 191, trimmed=True), required=True),
        "queue_ids": Field(ListOf(Hex32(), 1, 100), required=True),
        "capacity": Field(Integer(1, 1000), required=True),
        # Workers that predate keyed concurrency do not send the flag: they are unkeyed (K11).
        "concurrency_keys": Field(Boolean(), default=False),
        # The next page of the in-flight attempts: what the previous hello answered (L1).
        "in_flight_after": Field(Hex32(nullable=True), default=None),
    }
)
WORKER_CLAIM = Shape(
    {
        "max": Field(Integer(1, 100), default=1),
        "wait_ms": Field(Integer(0, 30_000), default=0),
        "start": Field(Boolean(), default=False),
    }
)
ATTEMPT_SESSION = Shape({"session_id": Field(Hex32(), required=True)})
ATTEMPT_RESULT = Shape(
    {
        "session_id": Field(Hex32(), required=True),
        "outcome": Field(Enum(("succeeded", "failed", "unknown")), required=True),
        "retryable": Field(Boolean(), default=False),
        "result": Field(AnyJson(), default=None),
        "error": Field(AnyJson(), default=None),
    }
)
ATTEMPT_START_BATCH = Shape(
    {
        "session_id": Field(Hex32(), required=True),
        "attempt_ids": Field(ListOf(Hex32(), 1, BATCH_MAX), required=True),
        # true: each started item answers {attempt_id, state} instead of the whole attempt.
        "brief": Field(Boolean(), default=False),
    }
)
# One item of a batch of results: an attempt's result, named by its id.
RESULT_ITEM = Object(
    Shape(
        {
            "attempt_id": Field(Hex32(), required=True),
            **{k: f for k, f in ATTEMPT_RESULT.fields.items() if k != "session_id"},
        }
    )
)
ATTEMPT_RESULT_BATCH = Shape(
    {
        "session_id": Field(Hex32(), required=True),
        "results": Field(ListOf(RESULT_ITEM, 1, BATCH_MAX), required=True),
    }
)
# POST /v1/workers/{session_id}/report-and-claim: the results, then a claim without the long
# poll (max 0 claims nothing).
WORKER_REPORT_CLAIM = Shape(
    {
        "results": Field(ListOf(RESULT_ITEM, 1, BATCH_MAX), required=True),
        "max": Field(Integer(0, BATCH_MAX), required=True),
        "start": Field(Boolean(), default=False),
    }
)
