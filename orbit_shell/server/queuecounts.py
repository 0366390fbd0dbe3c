"""A queue's counts when read, each exact up to ``COUNT_MAX`` and beyond it flagged.

The queue row keeps its attempts in flight and unfinished tasks only where a limit asks for
them (sql/README.md, "Limits without a shared lock"): there they are read from the row, exact.
Elsewhere they are counted when read, and counting a backlog costs what it holds (20 ms of
mariadbd's CPU a read at 200,000 parked tasks). Reads have no rate limit, so one tenant polling
its queue depth, as autoscalers and dashboards do, would spend the CPU every tenant shares
(L1). So each count stops after ``COUNT_MAX + 1`` index entries, as a key's parked count does
(V1): a figure that stopped reads ``COUNT_MAX`` and is flagged a lower bound.

Every count is an equality range of an index, in one statement for all the queues asked
about: a derived table with a LIMIT per range (no outer reference, which MariaDB's derived
tables do not take), joined per queue. Tasks needing review are counted across the namespace
(``ix_tasks_ns_state`` has no queue), once, up to the same bound: past it, every queue's count
of them is a lower bound.
"""

from __future__ import annotations

from typing import Any

from orbit_shell.engine.db import Database
from orbit_shell.server import dbmetrics

COUNT_MAX = 10_000


def _bounded(source: str, where: str, select: str = "1", columns: str = "COUNT(*) AS n") -> str:
    """A count of one index range that stops after its LIMIT (COUNT_MAX + 1, bound later)."""
    return f"(SELECT {columns} FROM (SELECT {select} FROM {source} WHERE {where} LIMIT %s) x)"


_TASKS = "tasks t FORCE INDEX (ix_tasks_claim)"
_ATTEMPTS = "attempts a FORCE INDEX (ix_attempts_queue_lease)"
_LANE = "t.queue_id = %s AND t.lane = '{}'"
_PARTS = (
    ("ready", _bounded(_TASKS, _LANE.format("READY"))),
    ("delayed", _bounded(_TASKS, _LANE.format("DELAYED"))),
    ("parked", _bounded(_TASKS, _LANE.format("BLOCKED"))),
    (
        "in_flight",
        _bounded(
            _ATTEMPTS,
            "a.queue_id = %s AND a.state IN ('LEASED', 'RUNNING')",
            "a.concurrency_token",
            "COUNT(*) AS n, COALESCE(SUM(x.concurrency_token > 0), 0) AS held",
        ),
    ),
    (
        "expired",
        _bounded(
            _ATTEMPTS,
            "a.queue_id = %s AND a.state = 'EXPIRED'"
            " AND a.lease_expires_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
        ),
    ),
)
# DELAYED is a reserved word: every alias is quoted.
_PER_QUEUE = (
    "SELECT %s AS id, p_ready.n AS `ready`, p_delayed.n AS `delayed`, p_parked.n AS `parked`, "
    "p_in_flight.n AS `in_flight`, p_in_flight.held AS `held_keys`, "
    "p_expired.n AS `expired_last_hour`, "
    + dbmetrics.oldest_parked("%s")
    + " AS `oldest_parked_at` FROM "
    + ", ".join(f"{sql} p_{name}" for name, sql in _PARTS)
)
_REVIEW = (
    "SELECT x.queue_id, COUNT(*) AS n FROM (SELECT t.queue_id FROM tasks t FORCE INDEX"
    " (ix_tasks_ns_state) WHERE t.namespace_id = %s AND t.state = 'NEEDS_REVIEW' LIMIT %s) x"
    " GROUP BY x.queue_id"
)
BOUNDED = ("ready", "delayed", "parked", "in_flight", "held_keys", "expired_last_hour")


def attach(db: Database, namespace_id: int, queues: list[dict[str, Any]]) -> None:
    """Add to each queue row its figures: ``ready``, ``delayed``, ``parked``, ``in_flight``,
    ``held_keys``, ``expired_last_hour``, ``needs_review``, ``oldest_parked_at``, and the
    API's ``active_attempts`` and ``unfinished_tasks``; and ``lower_bounds``, the names of
    those that stopped at ``COUNT_MAX``."""
    if not queues:
        return
    args: list[Any] = []
    for q in queues:
        args += [q["id"], *[q["id"]] * 10]
        args += [value for _ in _PARTS for value in (q["id"], COUNT_MAX + 1)]
    counted = {
        row["id"]: row for row in db.query(" UNION ALL ".join([_PER_QUEUE] * len(queues)), args)
    }
    review = {r["queue_id"]: r["n"] for r in db.query(_REVIEW, [namespace_id, COUNT_MAX + 1])}
    review_more = sum(review.values()) > COUNT_MAX
    for q in queues:
        row = counted[q["id"]]
        more = {name for name in BOUNDED if row[name] > COUNT_MAX}
        q.update({name: min(int(row[name]), COUNT_MAX) for name in BOUNDED})
        q["oldest_parked_at"] = row["oldest_parked_at"]
        q["needs_review"] = min(int(review.get(q["id"], 0)), COUNT_MAX)
        if review_more:
            more.add("needs_review")
        _api_counts(q, more)
        q["lower_bounds"] = more


def _api_counts(q: dict[str, Any], more: set[str]) -> None:
    """active_attempts and unfinished_tasks: the row's counter where the queue's limit keeps
    it (exact at any size), else the parts' sum, a lower bound when a part stopped or the sum
    passes COUNT_MAX."""
    if q["max_concurrency"] is None:  # else the row's own active_attempts, kept exact
        q["active_attempts"] = q["in_flight"]
        if "in_flight" in more:
            more.add("active_attempts")
    if q["max_unfinished"] is not None:  # the row's own unfinished_tasks, kept exact
        return
    parts = ("ready", "delayed", "parked", "in_flight", "needs_review")
    total = sum(q[name] for name in parts)
    if total > COUNT_MAX or more.intersection(parts):
        more.add("unfinished_tasks")
    q["unfinished_tasks"] = min(total, COUNT_MAX)
