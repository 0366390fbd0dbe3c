"""Schedules: create, list, read, new version, pause, resume (K10).

Changing needs ``queues:manage``; reading needs ``tasks:read``. The definition's task goes
through the submission validator (K2 included) and its queue must be in the caller's scope.
"""

from __future__ import annotations

import json

import falcon

from orbit_shell import errors, validation
from orbit_shell.engine import serialize
from orbit_shell.server import actions, schedules
from orbit_shell.server.common import ok, read_json, scope
from orbit_shell.server.scoped import running_size, within_budget

# A schedule's columns but its definition (a list reads definitions within a bound).
HEAD = (
    "s.id, s.public_id, s.name, s.state, s.current_version, s.next_fire_at, s.created_at, "
    "s.updated_at, v.rule_kind, v.cron, v.timezone, v.interval_seconds, v.effective_from"
)
COLUMNS = HEAD + ", v.definition"
# From the schedules to their current versions by key (see schedules.DUE): the other order
# read every version ever written.
FROM = (
    "FROM schedules s STRAIGHT_JOIN schedule_versions v FORCE INDEX (PRIMARY) "
    "ON v.schedule_id = s.id AND v.version = s.current_version"
)


def schedule_view(row) -> dict:
    return {
        "schedule_id": row["public_id"],
        "name": row["name"],
        "state": row["state"],
        "version": row["current_version"],
        "rule": schedules.rule_of(row).as_json(),
        "definition": None if row["definition"] is None else json.loads(row["definition"]),
        "next_fire_at": serialize.iso(row["next_fire_at"]),
        "version_effective_from": serialize.iso(row["effective_from"]),
        "created_at": serialize.iso(row["created_at"]),
        "updated_at": serialize.iso(row["updated_at"]),
        # A list's schedule past its bound (L1): its own read answers the definition.
        **({"definition_omitted": True} if row.get("definition_omitted") else {}),
    }


def _in_scope(s) -> tuple[str, list[str]] | None:
    """The condition (to AND to a query over ``FROM``) and its arguments that a schedule's
    current task goes to a queue the credential covers (SPEC 1, L4): none for a credential
    of every queue; None when it covers no queue, and so sees no schedule."""
    if s.principal.all_queues:
        return "", []
    allowed = sorted(q["public_id"] for q in s.queues())
    if not allowed:
        return None
    marks = ", ".join(["%s"] * len(allowed))
    return f" AND JSON_UNQUOTE(JSON_EXTRACT(v.definition, '$.task.queue_id')) IN ({marks})", allowed


def schedule_row(s, schedule_id: str) -> dict:
    """The schedule with its current version; NOT_FOUND outside the namespace or when its
    task's queue is outside the credential's queue scope (SPEC 1, L4)."""
    scope = _in_scope(s)
    rows = (
        []
        if scope is None
        else s.db.query(
            f"SELECT {COLUMNS} {FROM} WHERE s.public_id = %s AND s.namespace_id = %s{scope[0]}",
            [schedule_id, s.namespace_id, *scope[1]],
        )
    )
    if not rows:
        raise errors.NotFound("schedule not found")
    return rows[0]


def schedule_list(s) -> list[dict]:
    """The namespace's schedules whose current task the credential's queues take in, in the
    order they were made. Their definitions together stay within a request body's bound
    (L1; the first whatever its size): a schedule past it comes with its definition NULL and
    ``definition_omitted`` set, for its own read to answer. The queue scope is applied in the
    query, so that no definition is read here only to be dropped."""
    scope = _in_scope(s)
    if scope is None:
        return []
    texts, budget = within_budget({"definition": "v.definition"}, "definition_omitted")
    return s.db.query(
        f"SELECT {HEAD}, {texts}"
        f" FROM (SELECT s.id, {running_size('LENGTH(v.definition)', 's.id')}"
        f"  {FROM} WHERE s.namespace_id = %s{scope[0]}) w"
        # From the window's ids to their rows by key, whatever the statistics say.
        " STRAIGHT_JOIN schedules s FORCE INDEX (PRIMARY) ON s.id = w.id"
        " STRAIGHT_JOIN schedule_versions v"
        " FORCE INDEX (PRIMARY) ON v.schedule_id = s.id AND v.version = s.current_version"
        " ORDER BY s.id",
        [*budget, s.namespace_id, *scope[1]],
    )


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
            validation.stored_json(body["definition"]),
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
            validation.stored_json(definition),
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
