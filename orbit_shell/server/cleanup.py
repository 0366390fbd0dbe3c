"""Retention (R1-R5): the cleanup pass that deletes what a namespace's windows have passed.

A pass calls ``retention_cleanup`` for one namespace until a batch comes back short, then
``keys_reclaim`` over its idle key rows (each deletion raising its stripe's token floor): each
call is one short transaction of at most ``batch`` rows of each kind, and between calls the
pass sleeps so that it deletes during ``DUTY`` of its time, and a second while InnoDB's
history list (the undo that purge has not yet removed) is above ``HISTORY_LIMIT`` (deletes
add to it, and a long list slows every read of the rows it covers) or a replica the DSN names
is more than ``LAG_LIMIT`` seconds behind (a failover to it would wait for the deletes). The
leader runs a pass over every namespace every ``ORBIT_CLEANUP_INTERVAL`` seconds
(:class:`Cleaner`); ``orbit-admin cleanup`` runs one now.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pymysql

from orbit_shell import errors
from orbit_shell.engine.db import Database, replica_lag
from orbit_shell.server.dbmetrics import HISTORY_LENGTH

log = logging.getLogger("orbit.cleanup")

TABLES = (
    "concurrency_resources",
    "tasks",
    "attempts",
    "task_history",
    "idempotency_records",
    "schedule_fires",
    "worker_sessions",
)
BATCH = 500
PAUSE = 0.01
# The share of its time a pass spends deleting: after each batch it sleeps nineteen times as
# long as the batch took. Beside a load that keeps both cores busy (bench/run --only cleanup)
# whatever the pass spends is the load's: at a tenth the load kept 0.87x of its tasks/s, at a
# twentieth 0.93-0.99x, deleting some 2,700 rows (380 finished tasks) a second meanwhile; a
# backlog left by a peak goes once the load eases, and orbit_cleanup_lag_seconds shows it.
DUTY = 0.05
# Undo records purge has not removed yet, above which a pass waits BACKOFF seconds between
# batches.
HISTORY_LIMIT = 100_000
BACKOFF = 1.0
# Seconds a replica may be behind before a pass waits BACKOFF between batches; asked at most
# every LAG_EVERY seconds, since each asking opens a connection per replica.
LAG_LIMIT = 10.0
LAG_EVERY = 1.0


def history_length(database: Database) -> int | None:
    """InnoDB's history list length (MariaDB and MySQL 8 alike); None where the account may
    not read it (it needs PROCESS), and the pass then paces itself by ``pause`` alone."""
    try:
        rows = database.query(HISTORY_LENGTH)
    except errors.OrbitError:
        return None
    return int(rows[0]["count"]) if rows and rows[0]["count"] is not None else None


class _Lag:
    """The most any replica of ``database`` is behind, asked at most every LAG_EVERY seconds.
    A replica that cannot say is left out: without the privilege, or stopped, it would
    otherwise hold back every pass for ever."""

    def __init__(self, database: Database) -> None:
        self.database, self.asked, self.seconds = database, float("-inf"), 0.0

    def behind(self) -> float:
        replicas = self.database.replicas()
        if replicas and time.monotonic() - self.asked >= LAG_EVERY:
            self.asked = time.monotonic()
            lags = [lag for lag in map(replica_lag, replicas) if lag is not None]
            self.seconds = max(lags, default=0.0)
        return self.seconds


def run_pass(
    database: Database,
    namespace_id: int,
    batch: int = BATCH,
    pause: float = PAUSE,
    duty: float = DUTY,
    sleep: Callable[[float], None] = time.sleep,
    deleted: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Delete everything the namespace's windows have passed; return the rows deleted per
    table. Between batches it sleeps at least ``pause`` and enough that deleting takes no more
    than ``duty`` of its time (1: as fast as it goes). ``deleted(table, rows)`` is told of
    each batch's deletions (the metrics)."""
    totals = dict.fromkeys(TABLES, 0)
    lag = _Lag(database)

    def count(row: dict) -> None:
        for table in TABLES:
            if row.get(table):
                totals[table] += int(row[table])
                if deleted is not None:
                    deleted(table, int(row[table]))

    def paced(took: float) -> None:
        length = history_length(database)
        if (length is not None and length > HISTORY_LIMIT) or lag.behind() > LAG_LIMIT:
            sleep(BACKOFF)
        else:
            sleep(max(pause, took * (1 / duty - 1)))

    # Finished work first: a key row is reclaimed only once no task of its key is to run.
    while True:
        began = time.monotonic()
        [[row]] = database.call("retention_cleanup", namespace_id, batch)
        count(row)
        if not row["more"]:
            break
        paced(time.monotonic() - began)
    after: tuple = (None, 0)
    while True:
        began = time.monotonic()
        [[row]] = database.call("keys_reclaim", namespace_id, batch, *after)
        count(row)
        if not row["more"]:
            return totals
        after = (row["next_at"], row["next_id"])
        paced(time.monotonic() - began)


def namespaces(database: Database) -> list[int]:
    return [r["id"] for r in database.query("SELECT id FROM namespaces ORDER BY id")]


class Cleaner:
    """The leader's cleanup loop: a pass over every namespace every ``interval`` seconds,
    while ``active()`` (this process leads, H4)."""

    def __init__(
        self,
        database: Database,
        interval: float,
        active: Callable[[], bool],
        deleted: Callable[[str, int], None] | None = None,
    ) -> None:
        self.db = database
        self.interval = interval
        self.active = active
        self.deleted = deleted
        self.stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="orbit-cleanup", daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            if not self.active():
                continue
            try:
                for namespace_id in namespaces(self.db):
                    run_pass(self.db, namespace_id, deleted=self.deleted)
            except (errors.OrbitError, pymysql.MySQLError) as exc:
                # The next pass starts over: every batch stands alone.
                log.warning("cleanup pass failed: %s", exc, extra={"action": "cleanup.error"})
