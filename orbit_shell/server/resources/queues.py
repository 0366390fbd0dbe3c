"""Queues: create, list, read, pause, resume (``queues:manage``; W8 settings)."""

from __future__ import annotations

import falcon

from orbit_shell import validation
from orbit_shell.engine import serialize
from orbit_shell.server import actions
from orbit_shell.server.common import ok, read_json, scope


class Queues:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "queues:manage")
        body = read_json(req, validation.QUEUE_CREATE, self.max_body)
        [[row]] = s.db.call(
            "queue_create",
            s.namespace_id,
            s.principal.application_id,
            body["name"],
            body["max_concurrency"],
            body["max_unfinished"],
            body["max_attempts"],
            body["lease_seconds"],
            body["retry_backoff_seconds"],
            body["retry_backoff_max_seconds"],
        )
        [queue] = s.counted([s.queue(row["queue_id"])])
        ok(req, resp, serialize.queue(queue), falcon.HTTP_201)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "queues:manage")
        ok(req, resp, [serialize.queue(r) for r in s.counted(s.queues())])

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, queue_id: str) -> None:
        s = scope(req, "queues:manage")
        ok(req, resp, serialize.queue(*s.counted([s.queue(queue_id)])))

    def on_post_pause(self, req: falcon.Request, resp: falcon.Response, queue_id: str) -> None:
        self._set_state(req, resp, queue_id, "PAUSED")

    def on_post_resume(self, req: falcon.Request, resp: falcon.Response, queue_id: str) -> None:
        self._set_state(req, resp, queue_id, "ACTIVE")

    def _set_state(self, req, resp, queue_id: str, state: str) -> None:
        s = scope(req, "queues:manage")
        read_json(req, validation.EMPTY, self.max_body)
        ok(req, resp, serialize.queue(*s.counted([actions.set_queue_state(s, queue_id, state)])))
