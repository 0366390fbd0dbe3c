"""Worker transports (W9): the same worker protocol over HTTP or directly over MySQL.

Both return the wire shapes of SPEC 5 (``task.assign`` dicts with the token as a decimal
string), so the worker and its protocol checks (W5) are the same whichever transport runs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from orbit_shell import errors, jsontext, validation, worker_shapes
from orbit_shell.engine import batches, longpoll, schema, serialize
from orbit_shell.engine.db import Database
from orbit_shell.engine.schema import SchemaMismatch
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import batch_results, local_error, local_errors

# The worker procedures' signatures and answers this SDK calls (worker_namespace answers the
# database's number). Raised with any change a direct worker of the previous number would break
# on: without the check such a worker ran until its first start, which failed as INTERNAL.
WORKER_PROTOCOL = 3


@dataclass(frozen=True)
class Hello:
    session_id: str
    lease_seconds: int
    in_flight: list[dict[str, Any]]
    # Set when in_flight is one page of more: a hello again with it answers the next (L1).
    in_flight_after: str | None = None


class Transport(Protocol):
    def hello(
        self,
        worker_id: str,
        queue_ids: list[str],
        capacity: int,
        concurrency_keys: bool,
        in_flight_after: str | None = None,
    ) -> Hello: ...
    # With ``start`` every attempt claimed is started in the claim's transaction (RUNNING):
    # for a caller that runs each at once.
    def claim(
        self, session_id: str, max: int, wait_ms: int, start: bool = False
    ) -> list[dict[str, Any]]: ...
    def start(self, session_id: str, attempt_id: str) -> dict[str, Any]: ...
    def renew(self, session_id: str, attempt_id: str) -> str: ...
    def result(
        self,
        session_id: str,
        attempt_id: str,
        outcome: str,
        retryable: bool,
        result: Any,
        error: Any,
    ) -> dict[str, Any]: ...
    def goodbye(self, session_id: str) -> None: ...

    # Batches: one item per attempt, in order, each its data or the typed ApiError it got.
    # A start answers {attempt_id, state} (the batch route's brief answer): the worker only
    # runs what started.
    def start_many(self, session_id: str, attempt_ids: list[str]) -> list[Any]: ...
    def result_many(self, session_id: str, results: list[dict[str, Any]]) -> list[Any]: ...

    # result_many's answers, then the task.assign messages of a claim of up to ``max`` made in
    # the same transaction (no long poll), started with ``start`` as a claim's.
    def report_and_claim(
        self, session_id: str, results: list[dict[str, Any]], max: int, start: bool = False
    ) -> tuple[list[Any], list[dict[str, Any]]]: ...


class HttpTransport:
    """The default: the W7 routes with a bearer token."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def hello(
        self, worker_id, queue_ids, capacity, concurrency_keys, in_flight_after=None
    ) -> Hello:
        body = {
            "worker_id": worker_id,
            "queue_ids": queue_ids,
            "capacity": capacity,
            "concurrency_keys": concurrency_keys,
        }
        if in_flight_after is not None:
            body["in_flight_after"] = in_flight_after
        data = self.client.request("POST", "/v1/workers/hello", body, safe=True)[1]
        return Hello(
            data["session_id"],
            data["lease_seconds"],
            data["in_flight"],
            data.get("in_flight_after"),  # absent from a server that answers all at once
        )

    def claim(self, session_id, max, wait_ms, start=False):
        data = self.client.request(
            "POST",
            f"/v1/workers/{session_id}/claim",
            {"max": max, "wait_ms": wait_ms, "start": start},
            timeout=self.client.timeout + wait_ms / 1000.0,
        )[1]
        return data["assignments"]

    def start(self, session_id, attempt_id):
        return self.client.request(
            "POST", f"/v1/attempts/{attempt_id}/start", {"session_id": session_id}
        )[1]

    def renew(self, session_id, attempt_id):
        return self.client.request(
            "POST", f"/v1/attempts/{attempt_id}/renew", {"session_id": session_id}
        )[1]["lease_expires_at"]

    def result(self, session_id, attempt_id, outcome, retryable, result, error):
        return self.client.request(
            "POST",
            f"/v1/attempts/{attempt_id}/result",
            {
                "session_id": session_id,
                "outcome": outcome,
                "retryable": retryable,
                "result": result,
                "error": error,
            },
            safe=True,
        )[1]

    def goodbye(self, session_id):
        self.client.request("POST", f"/v1/workers/{session_id}/goodbye", {})

    def start_many(self, session_id, attempt_ids):
        body = {"session_id": session_id, "attempt_ids": attempt_ids, "brief": True}
        return batch_results(self.client.request("POST", "/v1/attempts/start", body)[1])

    def result_many(self, session_id, results):
        return batch_results(
            self.client.request(
                "POST",
                "/v1/attempts/result",
                {"session_id": session_id, "results": results},
                safe=True,
            )[1]
        )

    def report_and_claim(self, session_id, results, max, start=False):
        data = self.client.request(
            "POST",
            f"/v1/workers/{session_id}/report-and-claim",
            {"results": results, "max": max, "start": start},
        )[1]
        return batch_results(data), data["assignments"]


def route_checked(
    shape: validation.Shape, body: dict[str, Any], sized: bool = False
) -> dict[str, Any]:
    """The body checks of the matching HTTP route (W9: same checks, same errors); with
    ``sized``, its size too, for the routes that carry results or tasks: a body over the 1 MiB
    an HTTP body may be is refused (413) before it reaches the database."""
    with local_errors():
        out = shape.parse(body)  # first: what it accepts is JSON that dumps
        # Measured as the HTTP transport would send it (the client's encoding).
        if sized and len(json.dumps(body).encode()) > validation.MAX_BODY_BYTES:
            raise errors.PayloadTooLarge()
        return out


class MysqlTransport:
    """Trusted workers inside the database's network: the same procedures, called directly.

    Args:
        dsn: a MySQL URL, typically of the account made by ``orbit-admin worker-account``.
        application, environment, namespace: the names the worker serves.

    Raises:
        SchemaMismatch: the database's worker procedures are of another WORKER_PROTOCOL
            (older: run ``orbit-migrate up``; newer: upgrade the worker).
    """

    def __init__(
        self, dsn: str, application: str, environment: str, namespace: str, sleep=time.sleep
    ) -> None:
        self.sleep = sleep
        self.db, row = open_namespace(
            dsn, application, environment, namespace, "worker_protocol", WORKER_PROTOCOL, "worker"
        )
        self.namespace_id = row["namespace_id"]
        self.application_id = row["application_id"]

    def _call(self, procedure: str, *args: Any):
        with local_errors():
            return self.db.call(procedure, *args)

    _check = staticmethod(route_checked)

    def hello(
        self, worker_id, queue_ids, capacity, concurrency_keys, in_flight_after=None
    ) -> Hello:
        self._check(
            worker_shapes.WORKER_HELLO,
            {
                "worker_id": worker_id,
                "queue_ids": list(queue_ids),
                "capacity": capacity,
                "concurrency_keys": concurrency_keys,
                "in_flight_after": in_flight_after,
            },
        )
        queues = sorted(set(queue_ids))
        session, in_flight = self._call(
            "worker_hello",
            self.namespace_id,
            self.application_id,
            worker_id,
            capacity,
            int(concurrency_keys),
            json.dumps(queues),
            jsontext.fingerprint({"queues": queues, "capacity": capacity}),
            in_flight_after,
        )
        row = session[0]
        return Hello(
            row["session_id"],
            row["lease_seconds"],
            serialize.assignments(in_flight),
            row["in_flight_after"],
        )

    def claim(self, session_id, max, wait_ms, start=False):
        body = self._check(
            worker_shapes.WORKER_CLAIM, {"max": max, "wait_ms": wait_ms, "start": start}
        )
        rows = longpoll.poll(
            lambda: self._call(
                "worker_claim", self.namespace_id, session_id, max, int(body["start"])
            )[0],
            wait_ms,
            self.sleep,
            ready=lambda: bool(
                self._call("session_ready", self.namespace_id, session_id)[0][0]["ready"]
            ),
        )
        return serialize.assignments(rows)

    def start(self, session_id, attempt_id):
        self._check(worker_shapes.ATTEMPT_SESSION, {"session_id": session_id})
        [[row]] = self._call("attempt_start", self.namespace_id, session_id, attempt_id)
        return serialize.attempt(row)

    def renew(self, session_id, attempt_id):
        self._check(worker_shapes.ATTEMPT_SESSION, {"session_id": session_id})
        [[row]] = self._call("attempt_renew", self.namespace_id, session_id, attempt_id)
        return serialize.iso(row["lease_expires_at"])

    def result(self, session_id, attempt_id, outcome, retryable, result, error):
        body = self._check(
            worker_shapes.ATTEMPT_RESULT,
            {
                "session_id": session_id,
                "outcome": outcome,
                "retryable": retryable,
                "result": result,
                "error": error,
            },
            sized=True,
        )
        [[row]] = self._call(
            "attempt_result",
            self.namespace_id,
            session_id,
            attempt_id,
            body["outcome"],
            int(body["retryable"]),
            None if body["result"] is None else jsontext.canonical_json(body["result"]),
            None if body["error"] is None else jsontext.canonical_json(body["error"]),
        )
        return {
            "attempt_id": row["attempt_id"],
            "task_id": row["task_id"],
            "duplicate": bool(row["duplicate"]),
        }

    def goodbye(self, session_id):
        self._call("worker_goodbye", self.namespace_id, session_id)

    def start_many(self, session_id, attempt_ids):
        body = self._check(
            worker_shapes.ATTEMPT_START_BATCH,
            {"session_id": session_id, "attempt_ids": attempt_ids, "brief": True},
        )
        return self._batch(
            lambda db, ns, sid, ids: batches.start_many(db, ns, sid, ids, brief=True),
            session_id,
            body["attempt_ids"],
        )

    def result_many(self, session_id, results):
        body = self._check(
            worker_shapes.ATTEMPT_RESULT_BATCH,
            {"session_id": session_id, "results": results},
            sized=True,
        )
        return self._batch(batches.result_many, session_id, body["results"])

    def report_and_claim(self, session_id, results, max, start=False):
        body = self._check(
            worker_shapes.WORKER_REPORT_CLAIM,
            {"results": results, "max": max, "start": start},
            sized=True,
        )
        granted: list[dict[str, Any]] = []

        def call(db, namespace_id, session_id, items):
            answers, rows = batches.report_claim(
                db, namespace_id, session_id, items, max, body["start"]
            )
            granted.extend(serialize.assignments(rows))
            return answers

        return self._batch(call, session_id, body["results"]), granted

    def _batch(self, fn, session_id, items):
        with local_errors():
            answers = fn(self.db, self.namespace_id, session_id, items)
        return [local_error(a) if isinstance(a, errors.OrbitError) else a for a in answers]


def open_namespace(
    dsn: str,
    application: str,
    environment: str,
    namespace: str,
    column: str,
    speaks: int,
    what: str,
) -> tuple[Database, dict[str, Any]]:
    """The direct transports' start: a pool calling the routines of this code's version where
    its SQL files are at hand, else the database's latest (an SDK installed without them), and
    the namespace's ids from ``worker_namespace``, whose protocol number in ``column`` must be
    ``speaks`` (check_protocol). A pool whose start fails is closed.

    Raises:
        SchemaMismatch, NotFoundError: as check_protocol and worker_namespace say.
    """
    db = Database(dsn, pool_size=4, routines=schema.code_version())
    try:
        with local_errors():
            [[row]] = db.call("worker_namespace", application, environment, namespace)
        check_protocol(row.get(column), speaks, what)
    except BaseException:
        db.close()  # the pooled connection, which nothing will use
        raise
    return db, row


def check_protocol(found: int | None, speaks: int, what: str = "worker") -> None:
    """Refuse a database whose ``what`` procedures are not the ones this SDK calls, before the
    first call that would fail on them (the HTTP server refuses such a database itself, K11).

    Raises:
        SchemaMismatch: saying which side is older; ``None`` is a database from before the
            number existed.
    """
    if found == speaks:
        return
    if found is None or found < speaks:
        raise SchemaMismatch(
            f"the database's {what} procedures are older than this {what} (protocol "
            f"{found or 0}, this {what} speaks {speaks}); run `orbit-migrate up` with "
            "this version of Orbit"
        )
    raise SchemaMismatch(
        f"the database's {what} procedures are newer than this {what} (protocol {found}, this "
        f"{what} speaks {speaks}); upgrade the {what}'s Orbit"
    )
