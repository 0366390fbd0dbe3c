"""Attempt calls of a worker: start, renew, result (W3, W7); each one procedure call."""

from __future__ import annotations

import falcon

from .. import serialize, validation
from .common import ok, read_json, scope


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
        [[row]] = s.db.call(
            "attempt_result",
            s.namespace_id,
            body["session_id"],
            attempt_id,
            body["outcome"],
            int(body["retryable"]),
            None if body["result"] is None else validation.canonical_json(body["result"]),
            None if body["error"] is None else validation.canonical_json(body["error"]),
        )
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
