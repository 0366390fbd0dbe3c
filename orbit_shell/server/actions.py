"""The operator's state changes, shared by the API resources and the dashboard: each checks
the credential's scope and its queue scope, then calls the one procedure that makes the change,
so a change made from either door is the same change."""

from __future__ import annotations

from typing import Any

from orbit_shell.server import schedules
from orbit_shell.server.schedule_reads import schedule_row
from orbit_shell.server.scoped import Scope


def set_queue_state(s: Scope, queue_id: str, state: str) -> dict[str, Any]:
    """Pause (``PAUSED``) or resume (``ACTIVE``) a queue; returns its row."""
    s.principal.require("queues:manage")
    s.queue(queue_id)  # NOT_FOUND outside the credential's queue scope
    s.db.call("queue_set_state", s.namespace_id, queue_id, state)
    return s.queue(queue_id)


def cancel_task(s: Scope, task_id: str) -> dict[str, Any]:
    """Cancel a task that has not started (its key's rules are the procedure's); its row."""
    s.principal.require("tasks:manage")
    s.task(task_id)
    s.db.call("task_cancel", s.namespace_id, task_id, s.principal.actor)
    return s.task(task_id)


def resolve_task(s: Scope, task_id: str, state: str, note: str | None) -> dict[str, Any]:
    """Resolve a NEEDS_REVIEW task to SUCCEEDED, FAILED or WAITING; its row."""
    s.principal.require("tasks:manage")
    s.task(task_id)
    s.db.call("task_resolve", s.namespace_id, task_id, state, s.principal.actor, note)
    return s.task(task_id)


def set_schedule_state(s: Scope, schedule_id: str, state: str) -> dict[str, Any]:
    """Pause or resume a schedule; a resume continues from now (the paused period is not
    replayed). Returns its row with its current version."""
    s.principal.require("queues:manage")
    current = schedule_row(s, schedule_id)
    s.db.call(
        "schedule_set_state",
        s.namespace_id,
        schedule_id,
        state,
        schedules.rule_of(current).next_after(schedules.utcnow()),
    )
    return schedule_row(s, schedule_id)
