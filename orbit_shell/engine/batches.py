"""The batch procedures (task_submit_many, attempt_start_many, attempt_result_many, and
worker_report_claim, results and a claim): one transaction for many items, each answered with
its own data or its own error.

The HTTP routes and the MySQL worker transport call these, so the two transports batch the
same way (W9).
"""

from __future__ import annotations

import json
from typing import Any

from orbit_shell import errors, jsontext, task_shapes
from orbit_shell.engine import serialize
from orbit_shell.engine.db import Database
from orbit_shell.engine.dberrors import signal_error


def submit_fields(body: dict[str, Any]) -> tuple:
    """task_submit's parameters from the fingerprint to if_busy, for a validated task body
    (a submission's, or a schedule's definition): every route fingerprints and stores it alike,
    so any route replays another's submission."""
    return (
        task_shapes.submission_fingerprint(body),
        body["handler"],
        body["handler_version"],
        body["payload_version"],
        jsontext.stored_json(body["payload"]),
        body["business_key"],
        body["concurrency_key"],
        body["priority"],
        body["max_attempts"],
        body["deadline_seconds"],
        # A schedule's definition stored before these fields has none: it waits, as then.
        body.get("if_busy", "wait"),
        *_debounce(body),
    )


def _debounce(body: dict[str, Any]) -> tuple[int | None, int | None]:
    """task_submit's debounce parameters: delay and longest wait in ms, or NULLs."""
    debounce = body.get("debounce")
    return (debounce["delay_ms"], debounce["max_wait_ms"]) if debounce else (None, None)


# submit_fields' values by the names task_submit_many reads them under in each item.
ITEM_FIELDS = (
    "fingerprint",
    "handler",
    "handler_version",
    "payload_version",
    "payload",
    "business_key",
    "concurrency_key",
    "priority",
    "max_attempts",
    "deadline_seconds",
    "if_busy",
    "debounce_delay_ms",
    "debounce_max_wait_ms",
)
# Those that may be none, sent as 0 (each is at least 1 when given): no JSON nulls reach
# JSON_TABLE, where MySQL 8 and MariaDB may read them differently.
ZERO_FOR_NONE = ("max_attempts", "deadline_seconds", "debounce_delay_ms", "debounce_max_wait_ms")


def _item_fields(body: dict[str, Any]) -> dict[str, Any]:
    """A task_submit_many item's fields: the single route's (submit_fields), so either route
    replays the other's submission."""
    item = dict(zip(ITEM_FIELDS, submit_fields(body), strict=True))
    for name in ZERO_FOR_NONE:
        item[name] = item[name] or 0
    return item


def submit_one(db: Database, procedure: str, *args: Any) -> dict[str, Any]:
    """CALL ``task_submit`` or ``task_submit_as`` and return its answer row.

    The routine reads its answer after its commit, so a replay that meets the end of its task's
    retention window can find the Idempotency-Key record and then no task: the cleanup deleted
    both in between. The window has then passed, and the call is made once more, which accepts
    the request anew (R2: 201, a new task).

    Raises:
        Unavailable: the task vanished twice running (no cleanup deletes a new task).
    """
    for _ in range(2):
        [rows] = db.call(procedure, *args)
        if rows:
            return rows[0]
    raise errors.Unavailable("the submission's task was deleted while it was answered; retry")


def submit_many(
    db: Database, namespace_id: int, actor: str, items: list[tuple[int, str, dict[str, Any]]]
) -> list[dict[str, Any] | errors.OrbitError]:
    """task_submit per ``(queue internal id, idempotency key, validated body)``, in order:
    ``{task_id, created}`` or the item's error."""
    wire = [
        {"queue": queue, "idempotency_key": key, **_item_fields(body)} for queue, key, body in items
    ]
    [rows] = db.call("task_submit_many", namespace_id, actor, _json(wire))
    return [
        signal_error(r["item_error"])
        if r["item_error"]
        else {"task_id": r["task_id"], "created": bool(r["created"])}
        for r in rows
    ]


# Who a worker's batch call acts for: a namespace id (the caller checked the credential), or
# a bearer credential ``(public id, token SHA-256)`` that the routine's ``*_as`` form checks
# in the same call (worker_credential).
Caller = int | tuple[str, str]


def call_as(db: Database, routine: str, caller: Caller, *args: Any) -> list[list[dict[str, Any]]]:
    """CALL ``routine`` for a namespace id, or its ``*_as`` form for a bearer credential."""
    if isinstance(caller, tuple):
        return db.call(f"{routine}_as", *caller, *args)
    return db.call(routine, caller, *args)


def start_many(
    db: Database, caller: Caller, session_id: str, attempt_ids: list[str], brief: bool = False
) -> list[dict[str, Any] | errors.OrbitError]:
    """attempt_start per id, in order: the attempt (now RUNNING) or the item's error; with
    ``brief`` only ``{attempt_id, state}`` of each started attempt."""
    [rows] = call_as(
        db, "attempt_start_many", caller, session_id, json.dumps(attempt_ids), int(brief)
    )
    if brief:
        return [
            signal_error(r["item_error"])
            if r["item_error"]
            else {"attempt_id": a, "state": "RUNNING"}
            for r, a in zip(rows, attempt_ids, strict=True)
        ]
    return [
        signal_error(r["item_error"]) if r["item_error"] else serialize.attempt(r) for r in rows
    ]


def result_many(
    db: Database, caller: Caller, session_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any] | errors.OrbitError]:
    """attempt_result per item, in order: ``{attempt_id, task_id, duplicate}`` or the item's
    error. Results and errors travel as the same canonical JSON text the single call sends, so
    a result repeated through either route is recognised as a duplicate."""
    [rows] = call_as(db, "attempt_result_many", caller, session_id, _result_wire(items))
    return _result_answers(rows)


def report_claim(
    db: Database,
    caller: Caller,
    session_id: str,
    items: list[dict[str, Any]],
    max: int,
    start: bool = False,
) -> tuple[list[dict[str, Any] | errors.OrbitError], list[dict[str, Any]]]:
    """worker_report_claim: ``result_many``'s answers for ``items``, then the rows of a claim
    of up to ``max`` (no long poll), started with ``start``, committed together; the caller
    makes the ``task.assign`` messages (``serialize.assignments`` or ``assignments_json``)."""
    rows, granted = call_as(
        db, "worker_report_claim", caller, session_id, _result_wire(items), max, int(start)
    )[:2]
    return _result_answers(rows), granted


def _result_wire(items: list[dict[str, Any]]) -> str:
    return _json(
        [
            {
                "attempt_id": item["attempt_id"],
                "outcome": item["outcome"],
                "retryable": int(bool(item.get("retryable"))),
                "result": _text(item.get("result")),
                "error": _text(item.get("error")),
            }
            for item in items
        ]
    )


def _result_answers(rows: list[dict[str, Any]]) -> list[dict[str, Any] | errors.OrbitError]:
    return [
        signal_error(r["item_error"])
        if r["item_error"]
        else {
            "attempt_id": r["attempt_id"],
            "task_id": r["task_id"],
            "duplicate": bool(r["duplicate"]),
        }
        for r in rows
    ]


def _text(value: Any) -> str:
    # '' for none: JSON text is never empty, and the procedure then never reads a JSON null
    # through JSON_TABLE (where MySQL 8 and MariaDB may differ).
    return "" if value is None else jsontext.canonical_json(value)


def _json(wire: list[dict[str, Any]]) -> str:
    # UTF-8 as is (not \u escapes), so JSON_UNQUOTE gives back exactly the text sent: the same
    # bytes for keys (K2: exact match) and the same text for fingerprints.
    return json.dumps(wire, ensure_ascii=False)
