"""What a handler receives and raises, and the W5 checks every assignment passes first.

:class:`TaskEvent` is a handler's argument; :class:`Retry` and :class:`UnknownOutcome` are
what it raises to say how its attempt ended, and :func:`outcome_of` turns what it did into
the outcome a worker reports; :class:`ProtocolGuard` turns a ``task.assign`` message into a
TaskEvent, refusing one that breaks the keyed-concurrency protocol.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from orbit_shell import jsontext, validation
from orbit_shell.sdk.models import ProtocolError, parse_token

log = logging.getLogger("orbit.worker")


class Retry(Exception):
    """Raise from a handler: the attempt failed and may be retried (with backoff)."""


class UnknownOutcome(Exception):
    """Raise from a handler when the effect is unknown: the task goes to NEEDS_REVIEW."""


@dataclass(frozen=True)
class TaskInfo:
    task_id: str
    queue_id: str
    handler: str
    handler_version: str
    payload_version: str
    payload: Any
    priority: int
    concurrency_key: str | None
    business_key: str | None
    max_attempts: int | None
    deadline_at: str | None


@dataclass
class TaskEvent:
    """What a handler receives. ``concurrency_token`` is an int for keyed tasks, else None;
    ``concurrency_slot`` the permit's slot of its key (P2: 0 to the key's limit - 1), else
    None. A resource fences per ``(namespace, key, slot)``."""

    attempt_id: str
    attempt_number: int
    task: TaskInfo
    concurrency_token: int | None
    lease_expires_at: str
    concurrency_slot: int | None = None
    lease_lost: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def payload(self) -> Any:
        return self.task.payload


class ProtocolGuard:
    """W5: refuse assignments that break the keyed-concurrency protocol.

    Refused: a keyed task without a token, a token or a slot without a key, a keyed
    task on a session that did not declare support, and a re-dispatch that changes an
    attempt's key, token or slot.
    """

    def __init__(self, concurrency_keys: bool, remember: int = 10_000) -> None:
        self.concurrency_keys = concurrency_keys
        self.seen: collections.OrderedDict[str, tuple[str | None, int | None, int | None]] = (
            collections.OrderedDict()
        )
        self.remember = remember

    def check(self, wire: dict[str, Any]) -> TaskEvent:
        if wire.get("type") != "task.assign":
            raise ProtocolError(f"unexpected message type {wire.get('type')!r}")
        task = wire["task"]
        key = task.get("concurrency_key") or None
        raw_token = wire.get("concurrency_token")
        if key is not None and raw_token is None:
            raise ProtocolError(f"keyed task {task['task_id']} arrived without a token")
        if key is None and raw_token is not None:
            raise ProtocolError(f"task {task['task_id']} has a token but no key")
        if key is not None and not self.concurrency_keys:
            raise ProtocolError(
                f"keyed task {task['task_id']} sent to a session without concurrency_keys"
            )
        token = None if raw_token is None else parse_token(raw_token)
        slot = parse_slot(task["task_id"], key, wire.get("concurrency_slot"))
        attempt_id = wire["attempt_id"]
        if attempt_id in self.seen and self.seen[attempt_id] != (key, token, slot):
            raise ProtocolError(
                f"re-dispatch of attempt {attempt_id} changed its key, token or slot"
            )
        self.seen[attempt_id] = (key, token, slot)
        self.seen.move_to_end(attempt_id)
        while len(self.seen) > self.remember:
            self.seen.popitem(last=False)
        info = TaskInfo(
            task_id=task["task_id"],
            queue_id=task["queue_id"],
            handler=task["handler"],
            handler_version=task["handler_version"],
            payload_version=task["payload_version"],
            payload=task.get("payload"),
            priority=task.get("priority", 5),
            concurrency_key=key,
            business_key=task.get("business_key"),
            max_attempts=task.get("max_attempts"),
            deadline_at=task.get("deadline_at"),
        )
        return TaskEvent(
            attempt_id, wire["attempt_number"], info, token, wire["lease_expires_at"], slot
        )


def parse_slot(task_id: str, key: str | None, raw: Any) -> int | None:
    """A keyed assignment's slot (P2): an int of 0 to 999; none for an unkeyed one. A server
    from before key policies sends no slot: every key there admits one holder, on slot 0."""
    if key is None:
        if raw is not None:
            raise ProtocolError(f"task {task_id} has a slot but no key")
        return None
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw < 1000:
        raise ProtocolError(f"task {task_id} has a slot that is not an int of 0 to 999: {raw!r}")
    return raw


class Outcome(NamedTuple):
    """What a worker reports of one attempt, and about how many bytes it adds to a report's
    body (``report_bytes``), so that a report is cut before the body's bound."""

    outcome: str
    retryable: bool
    result: Any
    error: dict[str, str] | None
    size: int


def outcome_of(handler: Callable[[TaskEvent], Any] | None, event: TaskEvent) -> Outcome:
    """Run ``handler`` on ``event``: the :class:`Outcome` to report.

    A returned JSON value is ``succeeded``; :class:`Retry` is a retryable failure;
    :class:`UnknownOutcome` is ``unknown`` (NEEDS_REVIEW); anything else raised, no handler
    for the task, or a result the server would refuse, is a final failure."""
    if handler is None:
        missing = f"no handler for {event.task.handler} {event.task.handler_version}"
        return _failed(False, {"type": "NoHandler", "message": missing})
    try:
        result = handler(event)
        # What the server would refuse must not go in a report: it would refuse the whole
        # batch, and every other outcome in it with this one (L2).
        try:
            text = json.dumps(result, allow_nan=False)
        except ValueError:
            raise ValueError(
                "result is not JSON: NaN, Infinity and -Infinity are not JSON numbers"
            ) from None
        if jsontext.nests_deeper(text.encode(), validation.MAX_RESULT_DEPTH):
            raise ValueError(f"result nests deeper than {validation.MAX_RESULT_DEPTH} levels")
        if len(text) > validation.MAX_RESULT_BYTES:  # ASCII: json.dumps escapes the rest
            raise ValueError(
                f"result is {len(text)} bytes of JSON; a report carries at most "
                f"{validation.MAX_RESULT_BYTES}"
            )
        # Sized from the text just checked: a result is encoded once here, not again.
        return Outcome("succeeded", False, result, None, report_bytes(text, None))
    except Retry as exc:
        return _failed(True, _error("Retry", exc))
    except UnknownOutcome as exc:
        error = _error("UnknownOutcome", exc)
        return Outcome("unknown", False, None, error, report_bytes(None, error))
    except Exception as exc:  # noqa: BLE001 - a handler's failure is the task's result
        log.exception(
            "handler failed", extra={"action": "worker.handler", "attempt_id": event.attempt_id}
        )
        return _failed(False, _error(type(exc).__name__, exc))


def _failed(retryable: bool, error: dict[str, str]) -> Outcome:
    return Outcome("failed", retryable, None, error, report_bytes(None, error))


def _error(kind: str, exc: BaseException) -> dict[str, str]:
    """The error a report carries: the exception's message, cut to MAX_ERROR_CHARS (one as
    long as a result would refuse its report, and every other outcome in it, L2)."""
    message = str(exc)
    if len(message) > validation.MAX_ERROR_CHARS:
        message = f"{message[: validation.MAX_ERROR_CHARS]} [cut from {len(message)} characters]"
    return {"type": kind, "message": message}


def report_bytes(result_text: str | None, error: dict[str, str] | None) -> int:
    """About how many bytes an outcome adds to a report's body: its result (the JSON text
    ``outcome_of`` made of it, None for none) and error as JSON, and the item's other fields
    (an attempt id, the outcome)."""
    if result_text is None and error is None:
        return 160
    return 160 + len(result_text or "null") + len(json.dumps(error))
