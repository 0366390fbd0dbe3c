"""What the database says about purge, read at each scrape of ``/metrics``.

A transaction left open anywhere on the server (a backup with ``--single-transaction``, a
report, an idle session that began one) keeps InnoDB's purge from removing the index entries
every claimed task leaves at the head of its queue, and each claim and long-poll probe then
steps over all of them (README, Operating; bench/README.md). Two gauges say when
that is happening: InnoDB's history list length (undo logs purge has not processed) and the
age of the oldest open InnoDB transaction, its usual cause.

Both views need the PROCESS privilege. Without it the gauges are left out and the server says
so once; an unreachable database leaves them out of that scrape only.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator

import pymysql
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orbit_shell import errors
from orbit_shell.engine.db import Database

log = logging.getLogger("orbit.metrics")

ER_SPECIFIC_ACCESS_DENIED = 1227  # "you need the PROCESS privilege"
# InnoDB's history list length, the same in MariaDB and MySQL 8 (needs PROCESS); the cleanup
# paces itself by it too.
HISTORY_LENGTH = (
    "SELECT `count` FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"
)
QUERY = (
    f"SELECT ({HISTORY_LENGTH}) AS history, "
    "(SELECT COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, trx_started, NOW(6))), 0) "
    "FROM information_schema.INNODB_TRX) AS oldest_us"
)


class PurgeCollector(Collector):
    """The two gauges, from one query on a pooled connection per scrape."""

    def __init__(self, database: Database) -> None:
        self.db = database
        self.refused = False  # no PROCESS privilege: said once, then not asked again

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.refused:
            return
        try:
            with self.db.connection() as conn, conn.cursor() as cur:
                cur.execute(QUERY)
                row = cur.fetchone()
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] == ER_SPECIFIC_ACCESS_DENIED:
                self.refused = True
                log.warning(
                    "metrics: the database account may not read InnoDB's purge state (%s); "
                    "grant it PROCESS for orbit_db_history_list_length and "
                    "orbit_db_oldest_transaction_seconds",
                    exc.args[-1],
                    extra={"action": "metrics.purge"},
                )
            else:
                log.warning(
                    "metrics: purge state not read: %s", exc, extra={"action": "metrics.purge"}
                )
            return
        except errors.Unavailable:  # no connection: /readyz says so; this scrape goes without
            return
        if row["history"] is not None:
            yield GaugeMetricFamily(
                "orbit_db_history_list_length",
                "InnoDB undo logs not yet purged; grows while a long transaction is open",
                value=int(row["history"]),
            )
        yield GaugeMetricFamily(
            "orbit_db_oldest_transaction_seconds",
            "Age of the oldest open InnoDB transaction on the database server",
            value=int(row["oldest_us"]) / 1e6,
        )


# Per queue, what operators alert on (V1): a correlated read per queue and figure, each by
# index (ix_tasks_claim, ix_attempts_queue_lease). Counting reads every READY and parked entry
# of a queue, so one read of them costs what the backlogs hold; QueueCollector reuses a read
# for a while after it so that scrapes, however many, cannot make that cost a multiple.
QUEUE_FIGURES = (
    "(SELECT COUNT(*) FROM tasks t WHERE t.queue_id = q.id AND t.lane = 'READY') AS ready, "
    "(SELECT COUNT(*) FROM tasks t WHERE t.queue_id = q.id AND t.lane = 'BLOCKED') AS parked, "
    "(SELECT COUNT(*) FROM attempts a WHERE a.queue_id = q.id "
    " AND a.state IN ('LEASED', 'RUNNING') AND a.concurrency_token > 0) AS held_keys, "
    "(SELECT COUNT(*) FROM attempts a WHERE a.queue_id = q.id AND a.state = 'EXPIRED' "
    " AND a.lease_expires_at > UTC_TIMESTAMP(6) - INTERVAL 1 HOUR) AS expired_last_hour"
)


def oldest_parked(queue: str) -> str:
    """When the oldest task parked in ``queue`` (an SQL expression: a column or ``%s``, then
    bound ten times) was submitted; NULL when none is. One dive per priority, since
    ix_tasks_claim orders a lane by priority before id and MIN(id) over the lane would read
    all of it. LEAST of the ten (COALESCE: LEAST of a NULL is NULL; ~0 names no task)."""
    return (
        "(SELECT o.created_at FROM tasks o WHERE o.id = LEAST("
        + ", ".join(
            "COALESCE((SELECT MIN(t.id) FROM tasks t FORCE INDEX (ix_tasks_claim) WHERE"
            f" t.queue_id = {queue} AND t.lane = 'BLOCKED' AND t.priority = {p}), ~0)"
            for p in range(10)
        )
        + "))"
    )


QUEUE_QUERY = (
    f"SELECT q.public_id AS queue_id, {QUEUE_FIGURES}, "
    f"COALESCE(TIMESTAMPDIFF(MICROSECOND, {oldest_parked('q.id')}, UTC_TIMESTAMP(6)), 0) "
    "AS oldest_parked_us FROM queues q ORDER BY q.id"
)
QUEUE_GAUGES = (
    ("ready", "orbit_queue_ready_tasks", "Tasks a claim may take now", 1),
    ("parked", "orbit_queue_parked_tasks", "Tasks waiting for their key's holder", 1),
    (
        "oldest_parked_us",
        "orbit_queue_oldest_parked_seconds",
        "How long the queue's oldest parked task has waited",
        1e-6,
    ),
    (
        "held_keys",
        "orbit_queue_held_keys",
        "Keys held by the queue's leased or running attempts",
        1,
    ),
    (
        "expired_last_hour",
        "orbit_queue_expired_leases_last_hour",
        "Attempts of the queue whose lease ended before start in the last hour",
        1,
    ),
)


class QueueCollector(Collector):
    """Per-queue gauges, labelled by queue id only (no per-key labels: a closed set per
    queue the operator made), from one query.

    ``/metrics`` is open unless a token is set, and the query costs what every queue's
    backlog holds. So a read's rows answer the scrapes that follow it for ``REUSE`` times as
    long as the read took (at most ``REUSE_MAX`` seconds), and scrapes arriving while one
    reads wait for it: per server process the queries take at most about 1/``REUSE`` of one
    connection's time however often the page is scraped. At small backlogs a read takes a
    millisecond or so and is reused for tens of milliseconds; at a large one, for a few
    seconds (a Prometheus scrape interval is 15 s or more). The oldest wait is aged by the
    time since the read."""

    REUSE = 20
    REUSE_MAX = 30.0

    def __init__(self, database: Database, clock=time.monotonic) -> None:
        self.db = database
        self.clock = clock
        self.lock = threading.Lock()  # gevent's, under the server's workers
        self.rows: list[dict] = []
        self.read_at = 0.0
        self.fresh_until = -math.inf

    def _rows(self) -> tuple[list[dict], float] | None:
        """The rows and when they were read: the last read's while it is fresh, else new."""
        with self.lock:
            started = self.clock()
            if started < self.fresh_until:
                return self.rows, self.read_at
            try:
                with self.db.connection() as conn, conn.cursor() as cur:
                    cur.execute(QUEUE_QUERY)
                    rows = list(cur.fetchall())
            except pymysql.MySQLError as exc:
                log.warning("metrics: queues not read: %s", exc, extra={"action": "metrics.queues"})
                return None
            except errors.Unavailable:
                return None
            done = self.clock()
            self.rows, self.read_at = rows, done
            self.fresh_until = done + min((done - started) * self.REUSE, self.REUSE_MAX)
            return rows, done

    def collect(self) -> Iterator[GaugeMetricFamily]:
        read = self._rows()
        if read is None:
            return
        rows, read_at = read
        since_us = (self.clock() - read_at) * 1e6
        for column, name, text, scale in QUEUE_GAUGES:
            family = GaugeMetricFamily(name, text, labels=["queue_id"])
            for row in rows:
                value = int(row[column])
                if column == "oldest_parked_us" and value:
                    value += since_us
                family.add_metric([row["queue_id"]], value * scale)
            yield family


# Retention (R6), per database: how far the cleanup is behind (the oldest finished task past
# its namespace's window, the worst namespace's; one dive per final state of each namespace
# in ix_tasks_ns_finished), when the stalest namespace last had a full pass, and how many key
# rows there are (the table's estimate: counting them would read them all).
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "DEADLINE_EXCEEDED")
RETENTION_QUERY = (
    "SELECT COALESCE(MAX(GREATEST(0, TIMESTAMPDIFF(MICROSECOND, o.oldest, "
    "UTC_TIMESTAMP(6) - INTERVAL o.retention_seconds SECOND))), 0) AS lag_us, "
    "COALESCE(MIN(UNIX_TIMESTAMP(o.cleaned_at)), 0) AS last_pass, "
    "(SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = 'concurrency_resources') AS key_rows "
    "FROM (SELECT n.retention_seconds, n.cleaned_at, LEAST("
    + ", ".join(
        "COALESCE((SELECT MIN(t.finished_at) FROM tasks t FORCE INDEX (ix_tasks_ns_finished) "
        f"WHERE t.namespace_id = n.id AND t.state = '{state}'), UTC_TIMESTAMP(6))"
        for state in FINAL
    )
    + ") AS oldest FROM namespaces n) o"
)


class RetentionCollector(Collector):
    """The cleanup's gauges (R6), from one query per scrape."""

    def __init__(self, database: Database) -> None:
        self.db = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            [row] = self.db.query(RETENTION_QUERY)
        except errors.OrbitError as exc:
            log.warning(
                "metrics: retention not read: %s", exc, extra={"action": "metrics.retention"}
            )
            return
        yield GaugeMetricFamily(
            "orbit_cleanup_lag_seconds",
            "How long the oldest finished task past its namespace's retention has waited for "
            "the cleanup (the worst namespace's)",
            value=int(row["lag_us"]) / 1e6,
        )
        yield GaugeMetricFamily(
            "orbit_cleanup_last_pass_timestamp_seconds",
            "When the namespace cleaned least recently last had a full cleanup pass (0: never)",
            value=float(row["last_pass"] or 0),
        )
        yield GaugeMetricFamily(
            "orbit_key_rows",
            "Concurrency key rows in the database (InnoDB's estimate)",
            value=int(row["key_rows"] or 0),
        )
