"""Attempt calls of a worker: start, renew, result (W3, W7); each one procedure call.

The batch routes (start or report many attempts of one session) make one procedure call, one
transaction, for the batch; each attempt keeps its own idempotency and error (savepoints)."""

from __future__ import annotations

import falcon

from .. import batches, errors, serialize, validation
from .common import item, ok, read_json, scope


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
        ids = body["attempt_ids"]
        answers = scoped_batch(
            s,
            ids,
            ids,
            lambda chosen: batches.start_many(s.db, s.namespace_id, body["session_id"], chosen),
        )
        ok(req, resp, {"results": [item(a) for a in answers]})

    def on_post_result_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "workers:consume")
        body = read_json(req, validation.ATTEMPT_RESULT_BATCH, self.max_body)
        results = body["results"]
        answers = scoped_batch(
            s,
            [r["attempt_id"] for r in results],
            results,
            lambda chosen: batches.result_many(s.db, s.namespace_id, body["session_id"], chosen),
        )
        ok(req, resp, {"results": [item(a) for a in answers]})


def scoped_batch(s, attempt_ids: list[str], items: list, run) -> list:
    """Items whose attempt is outside the credential's queue scope answer NOT_FOUND and are not
    sent; the rest go to ``run`` in one call. Answers come back in the request's order."""
    answers: list = [None] * len(items)
    chosen = []
    for i, attempt_id in enumerate(attempt_ids):
        try:
            s.check_attempt_queue(attempt_id)
            chosen.append(i)
        except errors.NotFound as exc:
            answers[i] = exc
    if chosen:
        for i, answer in zip(chosen, run([items[i] for i in chosen]), strict=True):
            answers[i] = answer
    return answers


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
