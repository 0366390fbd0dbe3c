"""The Orbit error hierarchy: one class per API error code (SPEC 2).

Each class's docstring is its default message. Stored procedures raise the same codes with
``SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'CODE: message'``; ``db.py`` maps them back here.
"""

from __future__ import annotations

from typing import Any


class OrbitError(Exception):
    """Internal error."""

    code = "INTERNAL"
    status = 500

    def __init__(self, message: str | None = None, details: list[dict[str, Any]] | None = None):
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details or []
        super().__init__(self.message)


class InvalidArgument(OrbitError):
    """The request is invalid."""

    code, status = "INVALID_ARGUMENT", 400


class Unauthenticated(OrbitError):
    """A valid bearer token is required."""

    code, status = "UNAUTHENTICATED", 401


class PermissionDenied(OrbitError):
    """The credential lacks the scope this call needs."""

    code, status = "PERMISSION_DENIED", 403


class NotFound(OrbitError):
    """Not found."""

    code, status = "NOT_FOUND", 404


class IdempotencyConflict(OrbitError):
    """The Idempotency-Key was already used with different content."""

    code, status = "IDEMPOTENCY_CONFLICT", 409


class StateConflict(OrbitError):
    """The resource is not in a state that allows this action."""

    code, status = "STATE_CONFLICT", 409


class LeaseLost(OrbitError):
    """The attempt no longer holds its lease."""

    code, status = "LEASE_LOST", 409


class PayloadTooLarge(OrbitError):
    """The request body exceeds 1 MiB."""

    code, status = "PAYLOAD_TOO_LARGE", 413


class RequestTimeout(OrbitError):
    """The request body did not arrive in time."""

    code, status = "REQUEST_TIMEOUT", 408


class UnsupportedMediaType(OrbitError):
    """The request body must be application/json."""

    code, status = "UNSUPPORTED_MEDIA_TYPE", 415


class QuotaExceeded(OrbitError):
    """A quota is exhausted."""

    code, status = "QUOTA_EXCEEDED", 429


class Unavailable(OrbitError):
    """The service is temporarily unavailable."""

    code, status = "UNAVAILABLE", 503


class Internal(OrbitError):
    """Internal error."""


class QueueScoped(OrbitError):
    """The credential is limited to some queues.

    What a routine that authenticates its caller itself (``worker_credential``) signals for
    such a credential: the route then reads the credential and checks each item against its
    queues before calling the routine that takes a namespace. No client is answered with it
    (were one, it would be a 500 INTERNAL); not an ``Internal``, which is logged as a fault.
    """


BY_CODE: dict[str, type[OrbitError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        IdempotencyConflict,
        StateConflict,
        LeaseLost,
        PayloadTooLarge,
        RequestTimeout,
        UnsupportedMediaType,
        QuotaExceeded,
        Unavailable,
        Internal,
    )
}
BY_CODE["QUEUE_SCOPED"] = QueueScoped  # its own code stays INTERNAL: never an answer


def field_error(field: str, message: str) -> InvalidArgument:
    """An INVALID_ARGUMENT naming one field in ``details``."""
    return InvalidArgument(f"{field}: {message}", [{"field": field, "message": message}])
