"""The direct producer: trusted services submit through the submission procedures over MySQL,
as direct workers run the worker procedures (W9), without an HTTP round trip and a server
process between them and the database.

Its account (``orbit-admin producer-account``) may only EXECUTE ``worker_namespace``,
``producer_queue``, ``task_submit`` and ``task_submit_many``, and each of them refuses it any
namespace it is not bound to (L4). Each submission is checked here as ``POST /v1/tasks`` and
``POST /v1/tasks/batch`` check theirs (the same shapes, key rules, size bound and
fingerprint), and the procedures do the rest as they do for the routes (idempotency, quotas,
the queue's namespace), so either path replays the other's submission. What the server adds
and this does not: the per-credential submission rate (``ORBIT_SUBMIT_RATE``); a direct
producer is bounded by its account's connections.
"""

from __future__ import annotations

import json
from typing import Any

from orbit_shell import errors, task_shapes, validation
from orbit_shell.engine import batches, serialize
from orbit_shell.sdk.models import (
    ApiError,
    NotFoundError,
    SubmitReceipt,
    SubmitResult,
    SubmitTaskRequest,
    Task,
    local_error,
    local_errors,
)
from orbit_shell.sdk.transport import open_namespace, route_checked

# The submission procedures' signatures and answers this SDK calls (worker_namespace answers
# the database's number): raised with any change a direct producer of the previous number
# would break on, so that such a producer is refused when it connects, not at a submission.
SUBMIT_PROTOCOL = 2


class DirectProducer:
    """Submit tasks over MySQL.

    Args:
        dsn: a MySQL URL, typically of the account made by ``orbit-admin producer-account``.
        application, environment, namespace: the names it submits to.

    Raises:
        SchemaMismatch: the database's submission procedures are of another SUBMIT_PROTOCOL
            (older: run ``orbit-migrate up``; newer: upgrade the producer).
    """

    def __init__(self, dsn: str, application: str, environment: str, namespace: str) -> None:
        self.db, row = open_namespace(
            dsn, application, environment, namespace, "submit_protocol", SUBMIT_PROTOCOL, "producer"
        )
        self.namespace_id = row["namespace_id"]
        self.queues: dict[str, int] = {}  # public id -> internal id (queues never move)

    def close(self) -> None:
        self.db.close()

    def _call(self, procedure: str, *args: Any):
        with local_errors():
            return self.db.call(procedure, *args)

    def _queue(self, public_id: str) -> int:
        if public_id not in self.queues:
            [[row]] = self._call("producer_queue", self.namespace_id, public_id)
            self.queues[public_id] = row["queue_id"]
        return self.queues[public_id]

    def submit_task(self, idempotency_key: str, request: SubmitTaskRequest) -> SubmitResult:
        """As ``Client.submit_task``: ``created`` False for a replay of the same content.

        Raises:
            InvalidArgumentError, PayloadTooLargeError: the request is refused as the route
                refuses it. NotFoundError: no such queue in the namespace.
            IdempotencyConflictError, QuotaExceededError: as from the route.
        """
        with local_errors():
            idem = validation.idempotency_key(idempotency_key)
        body = route_checked(task_shapes.TASK_SUBMIT, request.to_json(), sized=True)
        queue = self._queue(body["queue_id"])
        with local_errors():
            row = batches.submit_one(
                self.db,
                "task_submit",
                self.namespace_id,
                queue,
                idem,
                *batches.submit_fields(body),
                "direct",  # the routine records the account's name instead
                None,
                None,
                None,
            )
        task = serialize.task_detail(json.loads(row["task"]))
        return SubmitResult(Task.from_json(task), created=bool(row["created"]))

    def submit_tasks(
        self, items: list[tuple[str, SubmitTaskRequest]]
    ) -> list[SubmitReceipt | ApiError]:
        """As ``Client.submit_tasks``: up to 100, in one transaction, each item answered with
        its receipt or its own error."""
        document = {"tasks": [{"idempotency_key": k, **r.to_json()} for k, r in items]}
        body = route_checked(task_shapes.TASK_BATCH, document, sized=True)
        answers: list[Any] = [None] * len(body["tasks"])
        chosen = []
        for i, task in enumerate(body["tasks"]):
            key = task.pop("idempotency_key")
            try:
                chosen.append((i, (self._queue(task["queue_id"]), key, task)))
            except NotFoundError as exc:  # an unknown queue is that item's error, as on the route
                answers[i] = exc
        if chosen:
            with local_errors():
                made = batches.submit_many(
                    self.db, self.namespace_id, "direct", [c for _, c in chosen]
                )
            for (i, _), answer in zip(chosen, made, strict=True):
                answers[i] = answer
        return [_receipt(a) for a in answers]


def _receipt(answer: Any) -> SubmitReceipt | ApiError:
    if isinstance(answer, errors.OrbitError):
        return local_error(answer)
    if isinstance(answer, ApiError):
        return answer
    return SubmitReceipt(answer["task_id"], bool(answer["created"]))
