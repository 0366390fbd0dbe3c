"""The scoped reads of schedules, shared by the routes, the dashboard and the operator's
actions: a schedule with its current version, and the namespace's list within a body's bound.
Reading needs ``tasks:read``; a schedule whose task goes to a queue outside the credential's
scope is not found (SPEC 1, L4)."""

from __future__ import annotations

import json

from orbit_shell import errors
from orbit_shell.engine import serialize
from orbit_shell.server import schedules
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
