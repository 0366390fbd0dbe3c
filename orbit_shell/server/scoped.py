"""Namespace-scoped reads: the only way API code reads tenant data.

A :class:`Scope` is built from the authenticated principal; every query it runs filters by the
principal's namespace and queue scope, so a cross-namespace read cannot be forgotten by a
resource handler. Anything outside the scope is ``NOT_FOUND``, never ``PERMISSION_DENIED``, so
existence does not leak (SPEC 1).
"""

from __future__ import annotations

import re
from typing import Any

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.engine.serialize import PARKED_COUNT_MAX
from orbit_shell.server import policies, queuecounts
from orbit_shell.server.auth import Principal
from orbit_shell.validation import MAX_BODY_BYTES

# A list page's columns: what a summary shows (serialize.task_summary, the dashboard's lists),
# without the payload, result and error a page of them would read and drop (L1: a page of 200
# tasks of 1 MiB each was 200 MiB through one server worker).
TASK_LIST_COLUMNS = (
    "t.id, t.public_id, q.public_id AS queue_public_id, t.queue_id, t.state, t.handler, "
    "t.handler_version, t.business_key, t.concurrency_key, t.priority, t.created_at, "
    "t.updated_at, t.schedule_version, t.fire_time, s.public_id AS schedule_public_id"
)
# A task's own read: the summary and its detail. task_submit's answer repeats these columns
# as one JSON object (POST /v1/tasks answers from it); keep both alike.
TASK_COLUMNS = (
    TASK_LIST_COLUMNS + ", t.payload_version, t.payload, t.max_attempts, t.attempts_used, "
    "t.available_at, t.deadline_at, t.finished_at, t.result, t.error, t.cancel_reason, "
    "t.burst_started_at, "
    "(SELECT r.public_id FROM tasks r WHERE r.id = t.replaced_by_task_id) AS replaced_by_public_id"
)
TASK_JOINS = "JOIN queues q ON q.id = t.queue_id LEFT JOIN schedules s ON s.id = t.schedule_id"
TASK_FROM = f"FROM tasks t {TASK_JOINS}"
# An attempt's columns but its result and error (an attempt list reads those within a bound).
ATTEMPT_HEAD = (
    "a.public_id AS attempt_id, t.public_id AS task_id, a.attempt_number, a.state, "
    "a.concurrency_token, a.concurrency_slot, t.concurrency_key, a.lease_expires_at, "
    "a.created_at, a.started_at, a.finished_at, a.outcome, a.retryable"
)
ATTEMPT_COLUMNS = ATTEMPT_HEAD + ", a.result, a.error"
MAX_PAGE = 200
# A page of a task's history or attempts when none is asked for (a task's own reads of them).
HISTORY_PAGE = 100
# Filter columns whose values may end in spaces (a concurrency key may not, K2).
PADDED_TEXTS = {"business_key", "handler"}


def running_size(size: str, order: str) -> str:
    """A window's columns for ``within_budget``: each row's number ``n`` and the running
    total of ``size`` up to it, in ``order``."""
    return (
        f"ROW_NUMBER() OVER (ORDER BY {order}) AS n, SUM({size}) OVER (ORDER BY {order}) AS total"
    )


def within_budget(texts: dict[str, str], flag: str) -> tuple[str, list[int]]:
    """Select-list terms (and their arguments) for a list whose large texts must not make its
    answer larger than a request may be (L1): each of ``texts`` (alias: expression) is carried
    while the window ``w`` (``running_size``) stays within MAX_BODY_BYTES, the first row's
    whatever its size, and NULL past it, where ``flag`` says so (the item's own read answers
    it whole). One server process builds each answer while the others it serves wait."""
    fits = "(w.n = 1 OR w.total <= %s)"
    terms = [f"IF({fits}, {expr}, NULL) AS {alias}" for alias, expr in texts.items()]
    terms.append(f"NOT {fits} AS {flag}")
    return ", ".join(terms), [MAX_BODY_BYTES] * len(terms)


# Task list filters and the index (namespace_id, column, id) of each.
LIST_INDEXES = {
    "queue_id": "ix_tasks_ns_queue",
    "state": "ix_tasks_ns_state",
    "business_key": "ix_tasks_ns_business",
    "concurrency_key": "ix_tasks_ns_key",
}


# A page's cursor is the public id of its last task: opaque to clients (only ever sent back).
# The OpenAPI document states its form; one of the form naming no task the credential can read
# is NOT_FOUND (Scope.task_position), never refused as invalid. Not the internal id: one
# sequence for the whole server, it let a tenant paging its own tasks read every tenant's
# submission rate off its cursors.
CURSOR_PATTERN = r"^[0-9a-f]{32}$"
_CURSOR = re.compile(CURSOR_PATTERN)
_NOT_A_CURSOR = "is not a cursor returned by this API"


class Scope:
    """Reads confined to one principal's namespace and queue scope."""

    def __init__(self, database: Database, principal: Principal) -> None:
        self.db = database
        self.principal = principal

    @property
    def namespace_id(self) -> int:
        return self.principal.namespace_id

    def covers_queue(self, queue_id: int) -> bool:
        """Whether the credential's queue scope takes in this queue (what _queue_filter asks
        of the rows it reads)."""
        return self.principal.all_queues or queue_id in self.principal.queue_ids

    def _queue_filter(self, column: str) -> tuple[str, list[Any]]:
        if self.principal.all_queues:
            return "", []
        ids = sorted(self.principal.queue_ids) or [0]
        return f" AND {column} IN ({', '.join(['%s'] * len(ids))})", list(ids)

    def task_position(self, cursor: str | None) -> int:
        """Where the task list resumes after ``cursor`` (0 without one): the internal id of the
        task it names. A cursor of another form is INVALID_ARGUMENT; one of the form naming no
        task this credential can see (none, another namespace's, a queue's outside its scope)
        is NOT_FOUND, all alike: no cursor tells apart what the credential may not see, and
        no cursor the OpenAPI document allows is refused as invalid."""
        if not cursor:
            return 0
        if not _CURSOR.match(cursor):
            raise errors.field_error("cursor", _NOT_A_CURSOR)
        extra, args = self._queue_filter("t.queue_id")
        rows = self.db.query(
            "SELECT t.id FROM tasks t WHERE t.public_id = %s AND t.namespace_id = %s" + extra,
            [cursor, self.namespace_id, *args],
        )
        if not rows:
            raise errors.NotFound("the cursor names no task this credential can read")
        return rows[0]["id"]

    # Queues ---------------------------------------------------------------------------------
    def queue(self, public_id: str) -> dict[str, Any]:
        """The queue row, or NOT_FOUND when it is outside the namespace or queue scope. Its
        counters are kept only under a limit: what it holds is counted by ``counted``."""
        extra, args = self._queue_filter("q.id")
        rows = self.db.query(
            "SELECT q.* FROM queues q WHERE q.public_id = %s AND q.namespace_id = %s" + extra,
            [public_id, self.namespace_id, *args],
        )
        if not rows:
            raise errors.NotFound("queue not found")
        return rows[0]

    def queues(self) -> list[dict[str, Any]]:
        """The rows of the queues the credential may see, in id order (as ``queue``)."""
        extra, args = self._queue_filter("q.id")
        return self.db.query(
            "SELECT q.* FROM queues q WHERE q.namespace_id = %s" + extra + " ORDER BY q.id",
            [self.namespace_id, *args],
        )

    def counted(self, queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The queue rows with what they hold counted, bounded (``queuecounts``)."""
        queuecounts.attach(self.db, self.namespace_id, queues)
        return queues

    # Tasks ----------------------------------------------------------------------------------
    def task(self, public_id: str) -> dict[str, Any]:
        extra, args = self._queue_filter("t.queue_id")
        rows = self.db.query(
            f"SELECT {TASK_COLUMNS} {TASK_FROM} WHERE t.public_id = %s AND t.namespace_id = %s"
            + extra,
            [public_id, self.namespace_id, *args],
        )
        if not rows:
            raise errors.NotFound("task not found")
        return rows[0]

    def waiting(self, task: dict[str, Any]) -> dict[str, Any] | None:
        """Why a WAITING task waits (V2): parked behind its key's holder (of a key of limit N,
        the holder of its lowest held slot), or until a time: its backoff's, its debounce's,
        or, as its key's next task, its key's rate's (P6: ``rate_wait``); None when it is
        claimable now or not waiting. The holder's task id is left out
        for a credential whose queues do not take in the holder's queue (SPEC 1); its token and
        since when it holds the key are the key's, not the other queue's."""
        if task["state"] != "WAITING":
            return None
        [row] = self.db.query(
            "SELECT t.lane, h.public_id AS holder_task_id, h.queue_id AS holder_queue, "
            "a.concurrency_token AS holder_token, a.concurrency_slot AS holder_slot, "
            "a.created_at AS since, r.key_limit, "
            "t.lane = 'DELAYED' AND r.candidate_task_id <=> t.id AS rate_wait "
            "FROM tasks t LEFT JOIN concurrency_resources r ON t.lane IN ('BLOCKED', 'DELAYED') "
            "AND r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key "
            "LEFT JOIN attempts a ON t.lane = 'BLOCKED' AND a.id = COALESCE(r.holder_attempt_id, "
            "(SELECT s.attempt_id FROM key_slots s WHERE s.resource_id = r.id "
            "AND s.attempt_id IS NOT NULL ORDER BY s.slot LIMIT 1)) "
            "LEFT JOIN tasks h ON h.id = a.task_id WHERE t.id = %s",
            [task["id"]],
        )
        if row["holder_queue"] is not None and not self.covers_queue(row["holder_queue"]):
            row["holder_task_id"] = None
        return row

    def key_policy(self, concurrency_key: str) -> dict[str, Any] | None:
        """The key policy that applies to a key (P1), or None: no rule, limit 1."""
        return policies.applying(self.db, self.namespace_id, concurrency_key)

    def key(self, concurrency_key: str) -> dict[str, Any]:
        """A key's resource row with its holders (P2: each with its slot), its limit and the
        policy that sets it, its READY candidate and its parked tasks (V1), as far as the
        credential's queues take them in; NOT_FOUND for a key never used in the namespace, or
        one none of whose tasks the credential may see.

        Reads by index only: the resource by its unique key, the holder and candidate by
        primary key, the parked tasks through ``ix_tasks_key_lane`` (counted up to
        ``PARKED_COUNT_MAX``; the oldest found per priority, ten dives)."""
        rows = self.db.query(
            "SELECT r.id, r.token, r.key_limit, r.rate_permits, r.rate_seconds, r.updated_at, "
            "UTC_TIMESTAMP(6) AS now, "
            "c.public_id AS ready_task_id, c.queue_id AS ready_queue "
            "FROM concurrency_resources r "
            "LEFT JOIN tasks c ON c.id = r.candidate_task_id "
            "WHERE r.namespace_id = %s AND r.concurrency_key = %s",
            [self.namespace_id, concurrency_key],
        )
        if not rows:
            raise errors.NotFound("concurrency key not found")
        # Every holder with its slot (P2): slot 0 on the key row, the others in key_slots.
        holders = self.db.query(
            "SELECT x.slot, a.public_id AS attempt_id, a.attempt_number, "
            "a.state AS attempt_state, a.concurrency_token AS holder_token, a.created_at AS since, "
            "a.lease_expires_at, h.public_id AS holder_task_id, h.queue_id AS holder_queue, "
            "ws.public_id AS session_id, ws.worker_id "
            "FROM (SELECT 0 AS slot, holder_attempt_id AS attempt FROM concurrency_resources "
            "WHERE id = %s AND holder_attempt_id IS NOT NULL UNION ALL "
            "SELECT slot, attempt_id FROM key_slots WHERE resource_id = %s "
            "AND attempt_id IS NOT NULL) x "
            "LEFT JOIN attempts a ON a.id = x.attempt LEFT JOIN tasks h ON h.id = a.task_id "
            "LEFT JOIN worker_sessions ws ON ws.id = a.session_id ORDER BY x.slot",
            [rows[0]["id"], rows[0]["id"]],
        )
        for holder in holders:
            if holder["holder_queue"] is not None and not self.covers_queue(holder["holder_queue"]):
                holder["holder_task_id"] = None
        row = {**rows[0], "concurrency_key": concurrency_key, "holders": holders}
        row["policy"] = self.key_policy(concurrency_key)
        row["next_permit_at"] = None
        if row["rate_permits"]:
            # P6: the rate's window from the permits-th latest grant; None = a permit may
            # begin now. At most rate_permits rows, by the primary key's prefix.
            later = self.db.query(
                "SELECT granted_at + INTERVAL %s SECOND AS at FROM key_rate_grants "
                "WHERE resource_id = %s ORDER BY granted_at DESC LIMIT 1 OFFSET %s",
                [row["rate_seconds"], row["id"], row["rate_permits"] - 1],
            )
            if later and later[0]["at"] > row["now"]:
                row["next_permit_at"] = later[0]["at"]
        extra, args = self._queue_filter("queue_id")
        parked_where = (
            "FROM tasks FORCE INDEX (ix_tasks_key_lane) WHERE namespace_id = %s "
            "AND concurrency_key = %s AND lane = 'BLOCKED'" + extra
        )
        base = [self.namespace_id, concurrency_key, *args]
        [counted] = self.db.query(
            f"SELECT COUNT(*) AS n FROM (SELECT 1 {parked_where} LIMIT %s) x",
            [*base, PARKED_COUNT_MAX + 1],
        )
        oldest = self.db.query(
            " UNION ALL ".join(
                f"(SELECT id, public_id, created_at {parked_where} AND priority = %s "
                "ORDER BY id LIMIT 1)"
                for _ in range(10)
            )
            + " ORDER BY id LIMIT 1",
            [value for priority in range(10) for value in (*base, priority)],
        )
        row["parked"] = counted["n"]
        row["oldest_parked"] = oldest[0] if oldest else None
        if row["ready_queue"] is not None and not self.covers_queue(row["ready_queue"]):
            row["ready_task_id"] = None
        if not self.principal.all_queues and not (
            any(h["holder_task_id"] for h in holders) or row["ready_task_id"] or row["parked"]
        ):
            # An idle key (or one whose only task of these queues is in backoff) is the
            # credential's when any of its tasks is in its queues: one index dive per queue
            # and lane (ix_tasks_queue_lane_key), however many tasks other queues hold.
            marks = ", ".join(["%s"] * len(args))
            if not self.db.query(
                "SELECT 1 FROM tasks FORCE INDEX (ix_tasks_queue_lane_key) "
                f"WHERE queue_id IN ({marks}) AND (lane IS NULL OR lane IN "
                "('READY', 'DELAYED', 'BLOCKED')) AND concurrency_key = %s "
                "AND namespace_id = %s LIMIT 1",
                [*args, concurrency_key, self.namespace_id],
            ):
                raise errors.NotFound("concurrency key not found")
        return row

    def tasks_examined(
        self, filters: dict[str, Any], after: int, limit: int, examine: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of tasks as ``tasks`` reads it, for a filter no index serves (the
        dashboard's handler): at most ``examine`` tasks of the other filters are read; when
        they are all read before the page is full, the page comes back short with where to go
        on (the public id of the last task read, one the credential can see), else None."""
        narrower = {k: v for k, v in filters.items() if k != "handler"}
        window = self.tasks(narrower, after, examine, columns="t.id, t.public_id")
        if not window:
            return [], None
        last = window[-1]
        rows = self.tasks(filters, after, limit, upto=last["id"])
        full = len(window) == examine and len(rows) < limit
        return rows, last["public_id"] if full else None

    def tasks(
        self,
        filters: dict[str, Any],
        after: int,
        limit: int,
        columns: str = TASK_LIST_COLUMNS,
        upto: int | None = None,
    ) -> list[dict[str, Any]]:
        """A page of tasks in id order after ``after``, as summaries (``TASK_LIST_COLUMNS``);
        filters are exact matches.

        Read through an index (namespace_id, [filter column,] id) of a given filter, never
        along the primary key: that reads every other namespace's tasks past the cursor.
        A text that may end in spaces (a business key, a handler) is matched on its length
        too: the columns' collation pads with spaces, so ``=`` alone took ``a`` for ``a ``."""
        where = ["t.namespace_id = %s", "t.id > %s"]
        args: list[Any] = [self.namespace_id, after]
        if upto is not None:  # tasks_examined's window
            where.append("t.id <= %s")
            args.append(upto)
        indexes = []
        for column, index in LIST_INDEXES.items():
            if column in filters:
                where.append(f"t.{column} = %s")
                args.append(filters[column])
                indexes.append(index)
        if "handler" in filters:  # the dashboard's: no index, so within tasks_examined's window
            where.append("t.handler = %s")
            args.append(filters["handler"])
        for column in PADDED_TEXTS & filters.keys():
            where.append(f"LENGTH(t.{column}) = %s")
            args.append(len(filters[column].encode("utf-8")))
        extra, extra_args = self._queue_filter("t.queue_id")
        hint = f"FORCE INDEX ({', '.join(indexes or ['ix_tasks_ns'])})"
        return self.db.query(
            f"SELECT {columns} FROM tasks t {hint} {TASK_JOINS} "
            f"WHERE {' AND '.join(where)}{extra} ORDER BY t.id LIMIT %s",
            [*args, *extra_args, limit],
        )

    def attempts(
        self, task_public_id: str, after: int = 0, limit: int = HISTORY_PAGE, newest: bool = False
    ) -> list[dict[str, Any]]:
        """A page of the task's attempts: those numbered above ``after``, at most ``limit``, in
        order (``newest``: the last ``limit`` of them, still in order). Their results and
        errors together stay within a request body's bound (L1; the first attempt's whatever
        their size): a later attempt past it comes with both NULL and ``detail_omitted`` set,
        for its own read to answer. A task of 100 attempts could otherwise answer 100 MiB
        from one server worker; a task resolved back to WAITING again and again has no
        bound on its attempts at all, so a page has one."""
        task = self.task(task_public_id)
        texts, budget = within_budget({"result": "a.result", "error": "a.error"}, "detail_omitted")
        window = running_size("p.size", "p.attempt_number")
        order = "DESC" if newest else ""
        # The page's sizes, not its texts, are carried through the derived tables.
        return self.db.query(
            f"SELECT {ATTEMPT_HEAD}, {texts}"
            f" FROM (SELECT p.id, {window} FROM (SELECT id, attempt_number,"
            "  COALESCE(LENGTH(result), 0) + COALESCE(LENGTH(error), 0) AS size"
            "  FROM attempts FORCE INDEX (uq_attempts_number) WHERE task_id = %s"
            f"  AND attempt_number > %s ORDER BY attempt_number {order} LIMIT %s) p) w"
            # From the task's attempts to their rows, whatever the statistics say.
            " STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = w.id"
            " STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id"
            " ORDER BY a.attempt_number",
            [*budget, task["id"], after, limit],
        )

    def attempt(self, task_public_id: str, number: int) -> dict[str, Any]:
        task = self.task(task_public_id)
        rows = self.db.query(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "WHERE a.task_id = %s AND a.attempt_number = %s",
            [task["id"], number],
        )
        if not rows:
            raise errors.NotFound("attempt not found")
        return rows[0]

    def attempt_by_id(self, attempt_public_id: str) -> dict[str, Any]:
        """One attempt by its public id, in one query (the result route's hot path)."""
        extra, args = self._queue_filter("a.queue_id")
        rows = self.db.query(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "WHERE a.public_id = %s AND a.namespace_id = %s" + extra,
            [attempt_public_id, self.namespace_id, *args],
        )
        if not rows:
            raise errors.NotFound("attempt not found")
        return rows[0]

    def history(
        self, task_public_id: str, after: int = 0, limit: int = HISTORY_PAGE
    ) -> list[dict[str, Any]]:
        """A page of the task's history: the events after the first ``after``, at most
        ``limit``, oldest first. Each row carries its ``position`` (1 for the first event),
        the cursor of the page that follows it. Paged by position, not by row id: the id is
        one sequence for the whole server. The offset is walked in ``ix_task_history_task``
        alone, the rows read by primary key."""
        task = self.task(task_public_id)
        rows = self.db.query(
            "SELECT h.event, h.from_state, h.to_state, h.actor, h.details, h.concurrency_token, "
            "a.public_id AS attempt_id, h.created_at FROM (SELECT id FROM task_history "
            "FORCE INDEX (ix_task_history_task) WHERE task_id = %s ORDER BY id LIMIT %s, %s) p "
            "STRAIGHT_JOIN task_history h FORCE INDEX (PRIMARY) ON h.id = p.id "
            "LEFT JOIN attempts a ON a.id = h.attempt_id ORDER BY h.id",
            [task["id"], after, limit],
        )
        for n, row in enumerate(rows, start=after + 1):
            row["position"] = n
        return rows

    def history_count(self, task: dict[str, Any]) -> int:
        """How many events the task's history holds (counted in its index)."""
        [row] = self.db.query(
            "SELECT COUNT(*) AS n FROM task_history FORCE INDEX (ix_task_history_task) "
            "WHERE task_id = %s",
            [task["id"]],
        )
        return int(row["n"])

    def check_session_queues(self, session_public_id: str) -> None:
        """For credentials limited to some queues: NOT_FOUND for a worker session that serves
        a queue outside them (SPEC 1: out of scope answers 404). An unknown session passes: the
        procedure answers for it, as it does for every credential."""
        if self.principal.all_queues:
            return
        rows = self.db.query(
            "SELECT wq.queue_id FROM worker_sessions s "
            "JOIN worker_session_queues wq ON wq.session_id = s.id "
            "WHERE s.public_id = %s AND s.namespace_id = %s",
            [session_public_id, self.namespace_id],
        )
        if not all(self.covers_queue(r["queue_id"]) for r in rows):
            raise errors.NotFound("worker session not found")

    def check_attempt_queue(self, attempt_public_id: str) -> None:
        """For credentials limited to some queues: NOT_FOUND for attempts of other queues."""
        if self.principal.all_queues:
            return
        extra, args = self._queue_filter("queue_id")
        rows = self.db.query(
            "SELECT 1 AS ok FROM attempts WHERE public_id = %s AND namespace_id = %s" + extra,
            [attempt_public_id, self.namespace_id, *args],
        )
        if not rows:
            raise errors.NotFound("attempt not found")
