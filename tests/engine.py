"""Direct procedure access for engine tests (the same calls the MySQL worker transport makes)."""

from __future__ import annotations

import json
import secrets

from orbit_shell.engine.db import Database
from orbit_shell.engine.schema import routine_name

# A queue's attempts in flight and unfinished tasks by their definitions (SPEC), counted in
# full: the oracle the API's bounded counts and the queue rows' kept counters are held to.
QUEUE_COUNTS = (
    "(SELECT COUNT(*) FROM attempts a WHERE a.queue_id = q.id"
    " AND a.state IN ('LEASED', 'RUNNING')) AS active_attempts,"
    " (SELECT COUNT(*) FROM tasks t WHERE t.queue_id = q.id"
    " AND t.state IN ('WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW')) AS unfinished_tasks"
)


def queue_counts(database: Database, queue_id: int) -> dict:
    """The queue's unfinished tasks and attempts in flight, counted in full."""
    [row] = database.query(f"SELECT {QUEUE_COUNTS} FROM queues q WHERE q.id = %s", (queue_id,))
    return {k: int(v) for k, v in row.items()}


def sweep(database: Database) -> None:
    """Run the sweeper until it has nothing left to do. One lease_sweep(100) call stops at 100
    leases and 100 deadlines, and tests share a database: another test's lapsed leases may be
    ahead of this one's in the sweeper's order."""
    while True:
        [[swept]] = database.call("lease_sweep", 100)
        if swept["recovered"] < 100 and swept["expired"] < 100:
            return


def submit_args(
    namespace_id: int,
    queue_id: int,
    idempotency_key: str,
    key: str = "",
    fingerprint: str = "f" * 64,
    priority: int = 5,
    max_attempts: int | None = None,
    deadline: int | None = None,
) -> tuple:
    """task_submit's arguments for a task of the test handler, payload {}."""
    return (
        namespace_id,
        queue_id,
        idempotency_key,
        fingerprint,
        "h",
        "v1",
        "v1",
        "{}",
        "",
        key,
        priority,
        max_attempts,
        deadline,
        "wait",
        None,
        None,
        "test",
        None,
        None,
        None,
    )


def submit_item(queue: int, concurrency_key: str = "", **fields) -> dict:
    """One item of task_submit_many's JSON array: a new no-op task (``fields`` override)."""
    return {
        "queue": queue,
        "idempotency_key": secrets.token_hex(12),
        "fingerprint": "0" * 64,
        "handler": "h",
        "handler_version": "v1",
        "payload_version": "v1",
        "payload": "{}",
        "business_key": "",
        "concurrency_key": concurrency_key,
        "priority": 5,
        "max_attempts": 0,
        "deadline_seconds": 0,
        **fields,
    }


def succeeded_items(attempt_ids: list[str]) -> str:
    """attempt_result_many's (and worker_report_claim's) items: each attempt succeeded, no
    result text, as the JSON the procedures take."""
    return json.dumps(
        [
            {"attempt_id": a, "outcome": "succeeded", "retryable": 0, "result": "", "error": ""}
            for a in attempt_ids
        ]
    )


def handler_reads(conn) -> int:
    """Rows read so far on this connection (its handler counters)."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(r["Value"]) for r in cur.fetchall())


# A key's row held as a transaction of its own would hold it: (namespace id, key).
KEY_ROW_LOCK = (
    "SELECT id FROM concurrency_resources WHERE namespace_id = %s AND concurrency_key = %s "
    "FOR UPDATE"
)


def lock_waiting(observer, connection_id: int) -> bool:
    """Whether connection ``connection_id`` waits for a row lock now, as ``observer`` sees it.
    InnoDB refreshes its information_schema tables only when they were last read more than
    0.1 s before: a poller that reads faster keeps what its first read saw."""
    with observer.cursor() as cur:
        cur.execute(
            "SELECT trx_state FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = %s",
            (connection_id,),
        )
        row = cur.fetchone()
    return bool(row) and row["trx_state"] == "LOCK WAIT"


def call_reads(conn, procedure: str, *args) -> tuple[int, list[dict]]:
    """Call a procedure on ``conn``: the rows it read and its first result set."""
    before = handler_reads(conn)
    with conn.cursor() as cur:
        cur.execute(f"CALL {routine_name(procedure)}({', '.join(['%s'] * len(args))})", args)
        rows = list(cur.fetchall())
        while cur.nextset():
            pass
    return handler_reads(conn) - before, rows


class Engine:
    def __init__(self, database: Database, tenant) -> None:
        self.db = database
        self.t = tenant
        [row] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
        self.queue = tenant.queue_id
        self.ids = {tenant.queue_id: row["id"]}

    def queue_create(
        self,
        name: str | None = None,
        lease: int = 30,
        backoff: int = 1,
        max_concurrency=None,
        backoff_max: int = 300,
    ) -> tuple[int, str]:
        [[row]] = self.db.call(
            "queue_create",
            self.t.namespace_id,
            self.t.application_id,
            name or "q-" + secrets.token_hex(4),
            max_concurrency,
            None,
            3,
            lease,
            backoff,
            backoff_max,
        )
        [q] = self.db.query("SELECT id FROM queues WHERE public_id = %s", (row["queue_id"],))
        self.ids[row["queue_id"]] = q["id"]
        return row["queue_id"], row["queue_id"]

    def submit(
        self,
        key: str = "",
        queue: int | None = None,
        priority: int = 5,
        deadline: int | None = None,
        max_attempts: int | None = None,
    ) -> str:
        [[row]] = self.db.call(
            "task_submit",
            *submit_args(
                self.t.namespace_id,
                self.ids[queue or self.queue],
                secrets.token_hex(12),
                key,
                secrets.token_hex(32),
                priority,
                max_attempts,
                deadline,
            ),
        )
        return row["task_id"]

    def hello(self, queues=None, capacity: int = 4, keys: bool = True, worker: str | None = None):
        session, in_flight = self.db.call(
            "worker_hello",
            self.t.namespace_id,
            self.t.application_id,
            worker or "w-" + secrets.token_hex(4),
            capacity,
            int(keys),
            json.dumps(queues or [self.queue]),
            "0" * 64,
            None,
        )
        return session[0]["session_id"], in_flight

    def claim(self, session: str, n: int = 4) -> list[dict]:
        [rows] = self.db.call("worker_claim", self.t.namespace_id, session, n, 0)
        return rows

    def start(self, session: str, attempt: str):
        return self.db.call("attempt_start", self.t.namespace_id, session, attempt)[0][0]

    def renew(self, session: str, attempt: str):
        return self.db.call("attempt_renew", self.t.namespace_id, session, attempt)[0][0]

    def result(self, session: str, attempt: str, outcome: str = "succeeded", retryable: int = 0):
        return self.db.call(
            "attempt_result", self.t.namespace_id, session, attempt, outcome, retryable, None, None
        )[0][0]

    def task(self, public_id: str) -> dict:
        [row] = self.db.query("SELECT * FROM tasks WHERE public_id = %s", (public_id,))
        return row

    def resource(self, key: str) -> dict:
        [row] = self.db.query(
            "SELECT * FROM concurrency_resources WHERE namespace_id = %s AND concurrency_key = %s",
            (self.t.namespace_id, key),
        )
        return row

    def expire(self, attempt: str) -> None:
        """Move an attempt's lease into the past (test clock control on the database side)."""
        self._backdate(
            "UPDATE attempts SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE public_id = %s",
            attempt,
        )

    def due(self, task: str) -> None:
        """End a task's retry backoff now (available_at in the past)."""
        self._backdate(
            "UPDATE tasks SET available_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE public_id = %s",
            task,
        )

    def unseen(self, *sessions: str) -> None:
        """Move the sessions' last sighting a minute into the past (gone quiet, or gone)."""
        for session in sessions:
            self._backdate(
                "UPDATE worker_sessions SET last_seen_at = last_seen_at - INTERVAL 1 MINUTE "
                "WHERE public_id = %s",
                session,
            )

    def _backdate(self, sql: str, public_id: str) -> None:
        self.force(sql, public_id)

    def force(self, sql: str, *args) -> None:
        """Test setup written straight to a table: a clock moved, or a state the procedures
        would not make, to see that they refuse it."""
        from orbit_shell.engine import db

        conn = db.connect(self.db.dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
        finally:
            conn.close()
