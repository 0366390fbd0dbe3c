"""Attempt calls of a worker: start, renew, result (W3, W7); each one procedure call.

The batch routes (start or report many attempts of one session) make one procedure call, one
transaction, for the batch; each attempt keeps its own idempotency and error (savepoints)."""

from __future__ import annotations

import falcon

from orbit_shell import jsontext, worker_shapes
from orbit_shell.engine import batches, serialize
from orbit_shell.server.common import (
    as_caller,
    in_scope_batch,
    in_scope_results,
    item,
    ok,
    own_body,
    read_json,
    scope,
)


class Attempts:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def _prepare(self, req, attempt_id: str, shape):
        s = scope(req, "workers:consume")
        body = read_json(req, shape, self.max_body)
        s.check_attempt_queue(attempt_id)
        return s, body

    def _one(self, req, attempt_id: str, routine: str) -> dict:
        """``routine`` (attempt_start, attempt_renew) for one attempt, in one round trip
        through its ``*_as`` form (``as_caller``)."""
        session = own_body(req, worker_shapes.ATTEMPT_SESSION, self.max_body, "workers:consume")[
            "session_id"
        ]

        def run(caller: batches.Caller) -> list:
            return batches.call_as(req.context.db, routine, caller, session, attempt_id)

        def scoped(s) -> list:
            s.check_attempt_queue(attempt_id)
            return run(s.namespace_id)

        [[row]] = as_caller(req, "workers:consume", run, scoped)
        return row

    def on_post_start(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        ok(req, resp, serialize.attempt(self._one(req, attempt_id, "attempt_start")))

    def on_post_renew(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        row = self._one(req, attempt_id, "attempt_renew")
        ok(req, resp, {"lease_expires_at": serialize.iso(row["lease_expires_at"])})

    def on_post_result(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        s, body = self._prepare(req, attempt_id, worker_shapes.ATTEMPT_RESULT)
        row = report(s, body["session_id"], attempt_id, body)
        task = s.task(row["task_id"])
        attempt = s.attempt_by_id(attempt_id)
        ok(
            req,
            resp,
            {
                "attempt": serialize.attempt(attempt),
                "task": serialize.task_detail(task),
                "duplicate": bool(row["duplicate"]),
            },
        )

    # Every route here but a single result authenticates in its one database call (the
    # ``*_as`` routines); a single result's answer reads the task and attempt after it.
    self_authenticating = (
        ("POST", "/v1/attempts/start"),
        ("POST", "/v1/attempts/result"),
        ("POST", "/v1/attempts/{attempt_id}/start"),
        ("POST", "/v1/attempts/{attempt_id}/renew"),
    )

    def on_post_start_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = own_body(req, worker_shapes.ATTEMPT_START_BATCH, self.max_body, "workers:consume")
        session, ids, brief = body["session_id"], body["attempt_ids"], body["brief"]

        def start(caller: batches.Caller, chosen: list[str]) -> list:
            return batches.start_many(req.context.db, caller, session, chosen, brief)

        def scoped(s) -> list:
            def prepare(attempt_id: str) -> str:
                s.check_attempt_queue(attempt_id)
                return attempt_id

            return in_scope_batch(ids, prepare, lambda chosen: start(s.namespace_id, chosen))

        answers = as_caller(req, "workers:consume", lambda bearer: start(bearer, ids), scoped)
        ok(req, resp, {"results": [item(a) for a in answers]})

    def on_post_result_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = own_body(req, worker_shapes.ATTEMPT_RESULT_BATCH, self.max_body, "workers:consume")
        session, results = body["session_id"], body["results"]

        def record(caller: batches.Caller, chosen: list[dict]) -> list:
            return batches.result_many(req.context.db, caller, session, chosen)

        answers = as_caller(
            req,
            "workers:consume",
            lambda bearer: record(bearer, results),
            lambda s: in_scope_results(s, results, lambda chosen: record(s.namespace_id, chosen)),
        )
        ok(req, resp, {"results": [item(a) for a in answers]})


def report(s, session_id: str, attempt_id: str, body: dict) -> dict:
    """One attempt_result call for a validated outcome."""
    [[row]] = s.db.call(
        "attempt_result",
        s.namespace_id,
        session_id,
        attempt_id,
        body["outcome"],
        int(body["retryable"]),
        None if body["result"] is None else jsontext.canonical_json(body["result"]),
        None if body["error"] is None else jsontext.canonical_json(body["error"]),
    )
    return row
