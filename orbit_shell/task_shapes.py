"""The request bodies of a submission (SPEC 2, P5): the task's fields, their rules across
fields, the batch of them and the idempotency fingerprint, built from the checks of
``validation``. A schedule's task is the same body."""

from __future__ import annotations

from typing import Any

from orbit_shell import jsontext
from orbit_shell.validation import (
    BATCH_MAX,
    AnyJson,
    ConcurrencyKey,
    Enum,
    Field,
    Hex32,
    IdempotencyKey,
    Integer,
    ListOf,
    Object,
    Shape,
    Text,
)

# P5: a burst of submissions on one key runs once, the newest, delay_ms after the burst's last
# submission and no later than max_wait_ms after its first (up to a day each; a max_wait_ms
# below delay_ms runs it at max_wait_ms). Without a key, or with if_busy wait or skip, nothing
# is replaced: each submission is a burst of its own, delayed so.
DEBOUNCE = Shape(
    {
        "delay_ms": Field(Integer(1, 86_400_000), required=True),
        "max_wait_ms": Field(Integer(1, 86_400_000), required=True),
    }
)


def _task_rules(body: dict[str, Any]) -> None:
    """if_busy left out is "wait", or "replace" for a debounced submission (P5: debounce
    implies replace); said, it governs a busy key as always, and the debounce only delays.
    Every combination is served, so the document's schema needs no rule across fields."""
    if body["if_busy"] is None:
        body["if_busy"] = "replace" if body["debounce"] else "wait"


TASK_FIELDS = {
    "queue_id": Field(Hex32(), required=True),
    "handler": Field(Text(1, 200), required=True),
    "handler_version": Field(Text(1, 64), required=True),
    "payload_version": Field(Text(1, 64), required=True),
    "payload": Field(AnyJson(), required=True),
    "business_key": Field(Text(0, 191), default=""),
    "concurrency_key": Field(ConcurrencyKey(), default=""),
    "priority": Field(Integer(0, 9), default=5),
    "max_attempts": Field(Integer(1, 100, nullable=True), default=None),
    "deadline_seconds": Field(Integer(1, 31_536_000, nullable=True), default=None),
    # P5: what a keyed submission does when its key is busy. Frozen with the task and part of
    # its fingerprint; "wait" parks it (K4), "skip" accepts it ended CANCELLED (KEY_BUSY),
    # "replace" cancels the key's waiting tasks of its handler (REPLACED) and waits.
    # Left out, it is "wait" (or "replace" with debounce): _task_rules says which.
    "if_busy": Field(Enum(("wait", "skip", "replace")), default=None),
    "debounce": Field(Object(DEBOUNCE), default=None),
}
TASK_SUBMIT = Shape(TASK_FIELDS, post=_task_rules)
# Fields added after submissions were stored, with their defaults: a body that has the default
# is fingerprinted without the field, as it was before, so a request replayed across the
# upgrade is the same request (K1).
LATER_DEFAULTS = {"if_busy": "wait", "debounce": None}


def submission_fingerprint(body: dict[str, Any]) -> str:
    """The idempotency fingerprint of a validated task body (a submission's, a batch item's or
    a schedule's definition): SHA-256 of its canonical JSON, defaulted later fields left out."""
    return jsontext.fingerprint(
        {k: v for k, v in body.items() if k not in LATER_DEFAULTS or v != LATER_DEFAULTS[k]}
    )


TASK_BATCH = Shape(
    {
        "tasks": Field(
            ListOf(
                Object(
                    Shape(
                        {"idempotency_key": Field(IdempotencyKey(), required=True), **TASK_FIELDS},
                        post=_task_rules,
                    )
                ),
                1,
                BATCH_MAX,
            ),
            required=True,
        )
    }
)
