"""Typed SDK results and errors. Tokens are Python ints parsed from decimal strings (K9)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from orbit_shell import errors


class ApiError(Exception):
    """An error answered by the Orbit API, with its code, HTTP status and request id."""

    code = "INTERNAL"

    def __init__(self, code: str, status: int, message: str, details=None, request_id=None):
        super().__init__(f"{code} ({status}): {message}")
        self.code, self.status, self.message = code, status, message
        self.details = details or []
        self.request_id = request_id


class InvalidArgumentError(ApiError): ...


class UnauthenticatedError(ApiError): ...


class PermissionDeniedError(ApiError): ...


class NotFoundError(ApiError): ...


class IdempotencyConflictError(ApiError): ...


class StateConflictError(ApiError): ...


class LeaseLostError(ApiError): ...


class PayloadTooLargeError(ApiError): ...


class UnsupportedMediaTypeError(ApiError): ...


class QuotaExceededError(ApiError): ...


class UnavailableError(ApiError): ...


ERRORS: dict[str, type[ApiError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "NOT_FOUND": NotFoundError,
    "IDEMPOTENCY_CONFLICT": IdempotencyConflictError,
    "STATE_CONFLICT": StateConflictError,
    "LEASE_LOST": LeaseLostError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "UNSUPPORTED_MEDIA_TYPE": UnsupportedMediaTypeError,
    "QUOTA_EXCEEDED": QuotaExceededError,
    "UNAVAILABLE": UnavailableError,
}


def api_error(code: str, status: int, message: str, details=None, request_id=None) -> ApiError:
    cls = ERRORS.get(code, ApiError)
    return cls(code, status, message, details, request_id)


def local_error(exc: errors.OrbitError) -> ApiError:
    """The typed error the API answers for ``exc``, for a check the SDK makes itself (the
    direct transport's calls, a key HTTP could not carry): the same class, code and details."""
    return api_error(exc.code, exc.status, exc.message, exc.details)


@contextlib.contextmanager
def local_errors() -> Iterator[None]:
    """Raise an OrbitError of the block as ``local_error`` does: the direct transports' way of
    answering what the routes would."""
    try:
        yield
    except errors.OrbitError as exc:
        raise local_error(exc) from exc


class ProtocolError(Exception):
    """The server sent something that breaks the worker protocol (W5); the SDK refuses it."""


U64_MAX = 2**64 - 1


def parse_token(value: Any) -> int:
    """A concurrency token from the wire: a decimal string of a non-zero unsigned 64-bit int."""
    if not isinstance(value, str) or not value.isdigit() or value.startswith("0"):
        raise ProtocolError(f"concurrency_token must be a non-zero decimal string, got {value!r}")
    token = int(value)
    if token > U64_MAX:
        raise ProtocolError("concurrency_token exceeds 64 bits")
    return token


@dataclass(frozen=True)
class SubmitTaskRequest:
    """The fields of ``POST /v1/tasks`` (the Idempotency-Key is passed separately)."""

    queue_id: str
    handler: str
    handler_version: str
    payload_version: str
    payload: Any
    business_key: str | None = None
    concurrency_key: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    deadline_seconds: int | None = None
    # "wait" (None: the server's default), "skip" or "replace": what a busy key does (P5).
    if_busy: str | None = None
    # {"delay_ms": D, "max_wait_ms": W}: a burst on the key runs once, the newest (P5).
    debounce: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        body = {
            "queue_id": self.queue_id,
            "handler": self.handler,
            "handler_version": self.handler_version,
            "payload_version": self.payload_version,
            "payload": self.payload,
        }
        for name in (
            "business_key",
            "concurrency_key",
            "priority",
            "max_attempts",
            "deadline_seconds",
            "if_busy",
            "debounce",
        ):
            if getattr(self, name) is not None:
                body[name] = getattr(self, name)
        return body


@dataclass(frozen=True)
class Task:
    task_id: str
    queue_id: str
    state: str
    handler: str
    handler_version: str
    priority: int
    business_key: str | None = None
    concurrency_key: str | None = None
    payload: Any = None
    payload_version: str | None = None
    attempts: int | None = None
    max_attempts: int | None = None
    result: Any = None
    error: Any = None
    created_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    deadline_at: str | None = None
    schedule_id: str | None = None
    schedule_version: int | None = None
    fire_time: str | None = None
    cancel_reason: str | None = None
    replaced_by_task_id: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        known = {k: data.get(k) for k in cls.__dataclass_fields__ if k != "raw"}
        return cls(**known, raw=data)


@dataclass(frozen=True)
class SubmitResult:
    task: Task
    created: bool


@dataclass(frozen=True)
class SubmitReceipt:
    """One accepted item of a batch submission (``created`` False: an idempotent replay)."""

    task_id: str
    created: bool


def batch_results(data: dict[str, Any]) -> list[Any]:
    """The items of a batch answer: each its ``data`` or the typed ApiError it got."""
    return [
        api_error(
            item["error"]["code"],
            item["status"],
            item["error"]["message"],
            item["error"].get("details"),
        )
        if "error" in item
        else item["data"]
        for item in data["results"]
    ]


@dataclass(frozen=True)
class Attempt:
    attempt_id: str
    task_id: str
    attempt_number: int
    state: str
    concurrency_token: int | None
    lease_expires_at: str | None
    outcome: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    concurrency_slot: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        token = data.get("concurrency_token")
        return cls(
            attempt_id=data["attempt_id"],
            task_id=data["task_id"],
            attempt_number=data["attempt_number"],
            state=data["state"],
            concurrency_token=None if token is None else parse_token(token),
            lease_expires_at=data.get("lease_expires_at"),
            outcome=data.get("outcome"),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            concurrency_slot=data.get("concurrency_slot"),
        )


@dataclass(frozen=True)
class Queue:
    queue_id: str
    name: str
    state: str
    max_concurrency: int | None
    max_unfinished: int | None
    max_attempts: int
    lease_seconds: int
    retry_backoff_seconds: int
    retry_backoff_max_seconds: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Queue:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TaskPage:
    tasks: list[Task]
    next_cursor: str | None


@dataclass(frozen=True)
class KeyPolicy:
    """A key policy (P1, P6): ``key`` or ``prefix`` (the other is None), its ``limit``, and
    its ``rate`` as ``(permits, per_seconds)`` or None."""

    policy_id: str
    key: str | None
    prefix: str | None
    limit: int
    rate: tuple[int, int] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyPolicy:
        rate = data.get("rate")
        return cls(
            data["policy_id"],
            data.get("key"),
            data.get("prefix"),
            data["limit"],
            None if rate is None else (rate["permits"], rate["per_seconds"]),
        )
