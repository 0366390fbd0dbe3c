"""Schedules: create, list, read, new version, pause, resume (K10).

Changing needs ``queues:manage``; reading needs ``tasks:read``. The definition's task goes
through the submission validator (K2 included) and its queue must be in the caller's scope.
"""

from __future__ import annotations

import json

import falcon

from orbit_shell import jsontext, validation
from orbit_shell.server import actions, schedules
from orbit_shell.server.common import ok, read_json, scope
from orbit_shell.server.schedule_reads import schedule_list, schedule_row, schedule_view


class Schedules:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "queues:manage")
        body = read_json(req, schedules.SCHEDULE_CREATE, self.max_body)
        s.queue(body["definition"]["task"]["queue_id"])  # NOT_FOUND outside the queue scope
        rule = body["rule"]
        [[row]] = s.db.call(
            "schedule_create",
            s.namespace_id,
            s.principal.application_id,
            body["name"],
            rule.kind,
            rule.cron,
            rule.timezone,
            rule.interval_seconds,
            jsontext.stored_json(body["definition"]),
            rule.next_after(schedules.utcnow()),
        )
        ok(req, resp, schedule_view(schedule_row(s, row["schedule_id"])), falcon.HTTP_201)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "tasks:read")
        ok(req, resp, [schedule_view(r) for r in schedule_list(s)])

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, schedule_id: str) -> None:
        s = scope(req, "tasks:read")
        ok(req, resp, schedule_view(schedule_row(s, schedule_id)))

    def on_post_versions(self, req, resp, schedule_id: str) -> None:
        s = scope(req, "queues:manage")
        body = read_json(req, schedules.SCHEDULE_VERSION, self.max_body)
        current = schedule_row(s, schedule_id)
        rule = body.get("rule") or schedules.rule_of(current)
        definition = body.get("definition") or json.loads(current["definition"])
        s.queue(definition["task"]["queue_id"])
        s.db.call(
            "schedule_add_version",
            s.namespace_id,
            schedule_id,
            rule.kind,
            rule.cron,
            rule.timezone,
            rule.interval_seconds,
            jsontext.stored_json(definition),
            rule.next_after(schedules.utcnow()),
        )
        ok(req, resp, schedule_view(schedule_row(s, schedule_id)), falcon.HTTP_201)

    def on_post_pause(self, req, resp, schedule_id: str) -> None:
        self._set_state(req, resp, schedule_id, "PAUSED")

    def on_post_resume(self, req, resp, schedule_id: str) -> None:
        self._set_state(req, resp, schedule_id, "ACTIVE")

    def _set_state(self, req, resp, schedule_id: str, state: str) -> None:
        s = scope(req, "queues:manage")
        read_json(req, validation.EMPTY, self.max_body)
        ok(req, resp, schedule_view(actions.set_schedule_state(s, schedule_id, state)))
