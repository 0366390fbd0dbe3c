"""Attempt calls of a worker: start, renew, result (W3, W7); each one procedure call.

The batch routes (start or report many attempts of one session) make one procedure call, one
transaction, for the batch; each attempt keeps its own idempotency and error (savepoints)."""

from __future__ import annotations

import falcon

from orbit_shell import validation
from orbit_shell.engine import batches, serialize
from orbit_shell.server.common import in_scope_batch, in_scope_results, item, ok, read_json, scope


class Attempts:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def _prepare(self, req, attempt_id: str, shape):
        s = scope(req, "workers:consume")
        body = read_json(req, shape, self.max_body)
        s.check_attempt_queue(attempt_id)
        return s, body

    def on_post_start(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        s, body = self._prepare(req, attempt_id, validation.ATTEMPT_SESSION)
        [[row]] = s.db.call("attempt_start", s.namespace_id, body["session_id"], attempt_id)
        ok(req, resp, serialize.attempt(row))

    def on_post_renew(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        s, body = self._prepare(req, attempt_id, validation.ATTEMPT_SESSION)
        [[row]] = s.db.call("attempt_renew", s.namespace_id, body["session_id"], attempt_id)
        ok(req, resp, {"lease_expires_at": serialize.iso(row["lease_expires_at"])})

    def on_post_result(self, req: falcon.Request, resp: falcon.Response, attempt_id: str) -> None:
        s, body = self._prepare(req, attempt_id, validation.ATTEMPT_RESULT)
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

    def on_post_start_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "workers:consume")
        body = read_json(req, validation.ATTEMPT_START_BATCH, self.max_body)

        def prepare(attempt_id: str) -> str:
            s.check_attempt_queue(attempt_id)
            return attempt_id

        answers = in_scope_batch(
            body["attempt_ids"],
            prepare,
            lambda ids: batches.start_many(
                s.db, s.namespace_id, body["session_id"], ids, body["brief"]
            ),
        )
        ok(req, resp, {"results": [item(a) for a in answers]})

    def on_post_result_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "workers:consume")
        body = read_json(req, validation.ATTEMPT_RESULT_BATCH, self.max_body)
        answers = in_scope_results(
            s,
            body["results"],
            lambda chosen: batches.result_many(s.db, s.namespace_id, body["session_id"], chosen),
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
        None if body["result"] is None else validation.canonical_json(body["result"]),
        None if body["error"] is None else validation.canonical_json(body["error"]),
    )
    return row
