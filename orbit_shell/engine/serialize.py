"""Database rows to API objects. Tokens leave as decimal strings, only for keyed tasks (K9)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

log = logging.getLogger("orbit.serialize")
PARKED_COUNT_MAX = 10_000  # the server counts a key's parked tasks up to this many
T = TypeVar("T")


def iso(value: dt.datetime | str | None) -> str | None:
    """UTC DATETIME(6) as RFC 3339 with microseconds and a Z. A string is a time the database
    formatted so already (task_submit's JSON answer) and is passed through."""
    if value is None or isinstance(value, str):
        return value
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def token(key: str, value: int, slot: int) -> dict[str, Any]:
    """``{"concurrency_token": "17", "concurrency_slot": 0}`` for keyed tasks, ``{}``
    otherwise (K9, P2: the slot of the permit, 0 under a limit of 1)."""
    return {"concurrency_token": str(value), "concurrency_slot": slot} if key else {}


def keys(row: dict[str, Any]) -> dict[str, str]:
    """business_key and concurrency_key, each only when set (K3: omitted for unkeyed tasks)."""
    return {name: row[name] for name in ("business_key", "concurrency_key") if row[name]}


def queue(row: dict[str, Any]) -> dict[str, Any]:
    """A queue row counted by ``Scope.counted``: each count is exact unless its
    ``..._is_lower_bound`` says it stopped at the bound (queuecounts.COUNT_MAX)."""
    return {
        "queue_id": row["public_id"],
        "name": row["name"],
        "state": row["state"],
        "max_concurrency": row["max_concurrency"],
        "max_unfinished": row["max_unfinished"],
        "max_attempts": row["max_attempts"],
        "lease_seconds": row["lease_seconds"],
        "retry_backoff_seconds": row["retry_backoff_seconds"],
        "retry_backoff_max_seconds": row["retry_backoff_max_seconds"],
        "active_attempts": row["active_attempts"],
        "unfinished_tasks": row["unfinished_tasks"],
        "active_attempts_is_lower_bound": "active_attempts" in row["lower_bounds"],
        "unfinished_tasks_is_lower_bound": "unfinished_tasks" in row["lower_bounds"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def task_summary(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "task_id": row["public_id"],
        "queue_id": row["queue_public_id"],
        "state": row["state"],
        "handler": row["handler"],
        "handler_version": row["handler_version"],
        "priority": row["priority"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
        **keys(row),
    }
    if row.get("schedule_public_id"):
        out["schedule_id"] = row["schedule_public_id"]
        out["schedule_version"] = row["schedule_version"]
        out["fire_time"] = iso(row["fire_time"])
    return out


def task_detail(row: dict[str, Any]) -> dict[str, Any]:
    out = task_summary(row)
    out.update(
        {
            "payload_version": row["payload_version"],
            "payload": _json(row["payload"]),
            "max_attempts": row["max_attempts"],
            "attempts": row["attempts_used"],
            "available_at": iso(row["available_at"]),
            "deadline_at": iso(row["deadline_at"]),
            "finished_at": iso(row["finished_at"]),
            "result": _json(row["result"]),
            "error": _json(row["error"]),
            "cancel_reason": cancel_reason(row),
            "replaced_by_task_id": row.get("replaced_by_public_id"),
        }
    )
    return out


def cancel_reason(row: dict[str, Any]) -> str | None:
    """Why a CANCELLED task was cancelled (P5): its column, or for a task cancelled before
    the column existed, when only a cancel ended a task so, CANCELLED_BY_USER."""
    if row["state"] != "CANCELLED":
        return None
    return row.get("cancel_reason") or "CANCELLED_BY_USER"


def key(row: dict[str, Any]) -> dict[str, Any]:
    """A concurrency key as ``GET /v1/keys/{key}`` shows it (V1, P2). ``state``: ``contended``
    (tasks are parked on it, behind its holders or its READY candidate), ``held`` (attempts
    hold permits and nothing is parked) or ``idle``. ``limit`` and ``rate`` are in force
    (``next_permit_at``: when the rate lets the next permit begin, null for now) and ``policy``
    is the rule that sets them (null: none, limit 1); ``holders`` lists every permit
    with its slot, lowest slot first, and ``holder`` is the first of them.
    Tokens are decimal strings (K9); ``parked.count_is_lower_bound`` says the count stopped."""
    parked = row["parked"]
    oldest = row["oldest_parked"]
    holders = [_holder(h) for h in row["holders"]]
    return {
        "concurrency_key": row["concurrency_key"],
        "state": "contended" if parked else "held" if holders else "idle",
        "highest_token": str(row["token"]),
        "limit": row["key_limit"],
        "rate": rate(row),
        "next_permit_at": iso(row["next_permit_at"]),
        "policy": policy(row["policy"]) if row["policy"] else None,
        "holder": holders[0] if holders else None,
        "holders": holders,
        "ready_task_id": row["ready_task_id"],
        "parked": {
            "count": min(parked, PARKED_COUNT_MAX),
            "count_is_lower_bound": parked > PARKED_COUNT_MAX,
            "oldest_task_id": oldest["public_id"] if oldest else None,
            "oldest_since": iso(oldest["created_at"]) if oldest else None,
        },
        "updated_at": iso(row["updated_at"]),
    }


def _holder(h: dict[str, Any]) -> dict[str, Any]:
    """One permit of a key; a holder the credential may not see keeps its slot, token and
    times, not its ids (SPEC 1)."""
    visible = h["holder_task_id"] is not None
    return {
        "concurrency_slot": int(h["slot"]),  # a UNION of 0 and a SMALLINT: DECIMAL
        "task_id": h["holder_task_id"],
        "attempt_id": h["attempt_id"] if visible else None,
        "attempt_number": h["attempt_number"],
        "attempt_state": h["attempt_state"],
        "session_id": h["session_id"] if visible else None,
        "worker_id": h["worker_id"] if visible else None,
        "concurrency_token": None if h["holder_token"] is None else str(h["holder_token"]),
        "since": iso(h["since"]),
        "lease_expires_at": iso(h["lease_expires_at"]),
    }


def policy(row: dict[str, Any]) -> dict[str, Any]:
    """A key policy's rule (P1, P6): ``{"policy_id", "key" | "prefix", "limit", "rate"}``."""
    match = "key" if row["match_kind"] == "KEY" else "prefix"
    return {
        "policy_id": row["policy_id"],
        match: row["pattern"],
        "limit": row["key_limit"],
        "rate": rate(row),
    }


def rate(row: dict[str, Any]) -> dict[str, int] | None:
    """A rate (P6) as answers show it: ``{"permits", "per_seconds"}``, or None."""
    if row.get("rate_permits") is None:
        return None
    return {"permits": row["rate_permits"], "per_seconds": row["rate_seconds"]}


def waiting(task: dict[str, Any], why: dict[str, Any] | None) -> dict:
    """What a WAITING task waits for (V2), to add to its detail: ``waiting_for`` the holder of
    its key when it is parked, ``waiting_until`` when it is in backoff; {} otherwise. ``why``
    is ``Scope.waiting``'s, which leaves out a holder the credential may not see."""
    if why is None:
        return {}
    if why["lane"] == "BLOCKED":
        held = why["holder_token"] is not None
        return {
            "waiting_for": {
                "concurrency_key": task["concurrency_key"],
                "holder_task_id": why["holder_task_id"] if held else None,
                "holder_token": str(why["holder_token"]) if held else None,
                "holder_slot": why["holder_slot"] if held else None,
                "limit": why["key_limit"],
                "since": iso(why["since"]) if held else None,
            }
        }
    if why["lane"] == "DELAYED" and why["rate_wait"]:
        # The key's next task, waiting for its key's rate (P6).
        return {"waiting_until": iso(task["available_at"]), "waiting_for_rate": True}
    if why["lane"] == "DELAYED":
        return {"waiting_until": iso(task["available_at"])}
    return {}


def attempt(row: dict[str, Any]) -> dict[str, Any]:
    out = {
        "attempt_id": row["attempt_id"],
        "task_id": row["task_id"],
        "attempt_number": row["attempt_number"],
        "state": row["state"],
        **token(row["concurrency_key"], row["concurrency_token"], row["concurrency_slot"]),
        "lease_expires_at": iso(row["lease_expires_at"]),
        "created_at": iso(row["created_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "outcome": row["outcome"],
        "retryable": None if row["retryable"] is None else bool(row["retryable"]),
        "result": _json(row["result"]),
        "error": _json(row["error"]),
    }
    if row.get("detail_omitted"):  # a list's attempt past its bound (L1): read it alone
        out["detail_omitted"] = True
    return out


def assignment(row: dict[str, Any]) -> dict[str, Any]:
    """A ``task.assign`` message (W7)."""
    task: dict[str, Any] = {
        "task_id": row["task_id"],
        "queue_id": row["queue_id"],
        "handler": row["handler"],
        "handler_version": row["handler_version"],
        "payload_version": row["payload_version"],
        "payload": _json(row["payload"]),
        "priority": row["priority"],
        "max_attempts": row["max_attempts"],
        "deadline_at": iso(row["deadline_at"]),
        "created_at": iso(row["created_at"]),
        **keys(row),
    }
    return {
        "type": "task.assign",
        "attempt_id": row["attempt_id"],
        "attempt_number": row["attempt_number"],
        "task": task,
        **token(row["concurrency_key"], row["concurrency_token"], row["concurrency_slot"]),
        "lease_expires_at": iso(row["lease_expires_at"]),
    }


def assignments(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``task.assign`` messages of a claim's rows, each made on its own (L3).

    A claim has committed before its answer is made, so one row that cannot be made into an
    answer (a payload nested past what the door now refuses, stored before it did) must not
    fail the answer and strand every other attempt of the claim: it is left out and logged.
    Its attempt stays leased, expires unstarted, and lease recovery ends the task after
    max_attempts such dispatches.
    """
    return _each(rows, assignment)


def assignments_json(rows: Iterable[dict[str, Any]]) -> str:
    """``assignments`` as the JSON text of an array, each message serialised on its own: a
    message whose text cannot be made is left out as in ``assignments``."""
    texts = _each(rows, lambda row: json.dumps(assignment(row), ensure_ascii=False))
    return "[" + ",".join(texts) + "]"


def _each(rows: Iterable[dict[str, Any]], make: Callable[[dict[str, Any]], T]) -> list[T]:
    out = []
    for row in rows:
        try:
            out.append(make(row))
        except (RecursionError, ValueError) as exc:
            _left_out(row, exc)
    return out


def _left_out(row: dict[str, Any], exc: Exception) -> None:
    log.error(
        "assignment left out of an answer: %s",
        type(exc).__name__,
        extra={"action": "claim.answer", "attempt_id": row.get("attempt_id")},
    )
