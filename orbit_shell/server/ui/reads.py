"""What the dashboard reads beyond the API's own scoped reads: per-queue figures, worker
sessions and a key's token history. Every read is confined to the scope's namespace and
queues (SPEC 1) and goes by index, bounded by a LIMIT or by what is in flight."""

from __future__ import annotations

from typing import Any

from orbit_shell.server.scoped import Scope

# A worker session is live while it has called within this many seconds (a claim's long poll
# lasts at most 30 s; the SDK calls again at once).
LIVE_SECONDS = 90


def queue_figures(s: Scope) -> list[dict[str, Any]]:
    """Per queue the credential may see: what /metrics exports, its delayed tasks, tasks
    needing review, unfinished tasks and attempts in flight, each counted up to
    queuecounts.COUNT_MAX (the page shows a count that stopped as "10,000+")."""
    return s.counted(s.queues())


def sessions(s: Scope, limit: int = 200) -> list[dict[str, Any]]:
    """Worker sessions seen most recently first, with their queues' names; a session that
    serves a queue outside a limited credential's scope is left out."""
    rows = s.db.query(
        "SELECT ws.id, ws.public_id, ws.worker_id, ws.capacity, ws.in_flight, ws.state, "
        "ws.concurrency_keys, ws.created_at, ws.last_seen_at, ws.closed_at, "
        "ws.last_seen_at > UTC_TIMESTAMP(6) - INTERVAL %s SECOND AND ws.state = 'OPEN' AS live "
        "FROM worker_sessions ws FORCE INDEX (ix_worker_sessions_seen) "
        "WHERE ws.namespace_id = %s ORDER BY ws.last_seen_at DESC LIMIT %s",
        [LIVE_SECONDS, s.namespace_id, limit],
    )
    if not rows:
        return []
    marks = ", ".join(["%s"] * len(rows))
    queues: dict[int, list[tuple[int, str]]] = {}
    for r in s.db.query(
        "SELECT wq.session_id, q.id, q.name FROM worker_session_queues wq "
        f"JOIN queues q ON q.id = wq.queue_id WHERE wq.session_id IN ({marks})",
        [r["id"] for r in rows],
    ):
        queues.setdefault(r["session_id"], []).append((r["id"], r["name"]))
    out = []
    for r in rows:
        served = queues.get(r["id"], [])
        if all(s.covers_queue(qid) for qid, _ in served):
            out.append({**r, "queues": [name for _, name in served]})
    return out


def live_sessions(s: Scope) -> int:
    return sum(1 for r in sessions(s) if r["live"])


def key_tokens(s: Scope, concurrency_key: str, limit: int = 30) -> list[dict[str, Any]]:
    """The key's latest permits: attempts of its most recent tasks, highest token first
    (ix_tasks_ns_key, newest tasks first, then each task's attempts)."""
    extra, args = s._queue_filter("t.queue_id")
    return s.db.query(
        "SELECT a.public_id AS attempt_id, a.attempt_number, a.concurrency_token, "
        "a.concurrency_slot, a.state, "
        "a.created_at, a.finished_at, t.public_id AS task_id "
        "FROM (SELECT t.id, t.public_id FROM tasks t FORCE INDEX (ix_tasks_ns_key) "
        "WHERE t.namespace_id = %s AND t.concurrency_key = %s" + extra + " "
        "ORDER BY t.id DESC LIMIT %s) t JOIN attempts a ON a.task_id = t.id "
        "WHERE a.concurrency_token > 0 ORDER BY a.concurrency_token DESC LIMIT %s",
        [s.namespace_id, concurrency_key, *args, limit, limit],
    )


def parked_tasks(s: Scope, concurrency_key: str, limit: int = 50) -> list[dict[str, Any]]:
    """The key's parked tasks in the order a release promotes them (ix_tasks_key_lane)."""
    extra, args = s._queue_filter("t.queue_id")
    return s.db.query(
        "SELECT t.public_id AS task_id, t.handler, t.priority, t.created_at, t.available_at, "
        "q.name AS queue_name FROM tasks t FORCE INDEX (ix_tasks_key_lane) "
        "JOIN queues q ON q.id = t.queue_id WHERE t.namespace_id = %s "
        "AND t.concurrency_key = %s AND t.lane = 'BLOCKED'" + extra + " "
        "ORDER BY t.priority, t.id LIMIT %s",
        [s.namespace_id, concurrency_key, *args, limit],
    )


def retention(s: Scope) -> dict[str, Any]:
    """The namespace's windows (R3, R6): how long finished tasks and idle key rows are kept,
    and when its last full cleanup pass ended."""
    [row] = s.db.query(
        "SELECT retention_seconds AS finished_for, "
        "COALESCE(keys_idle_seconds, retention_seconds) AS keys_idle_for, cleaned_at "
        "FROM namespaces WHERE id = %s",
        [s.namespace_id],
    )
    return row
