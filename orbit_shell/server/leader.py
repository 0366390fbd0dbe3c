"""One leader per database for the background loops (H4).

Every gunicorn worker of every ``orbit`` process starts a :class:`Leadership`; the one whose
connection holds the database's named lock (``GET_LOCK``, in MySQL 8 and MariaDB alike) is the
leader, and only the leader's sweeper and scheduler run. The server frees a named lock when
the connection holding it ends, so when the leader's process dies (killed, or its host gone)
a standby that asks again within ``interval`` seconds takes over: the bound is about
``interval`` plus the time the server takes to notice the dead connection (at once for a
killed process, whose socket closes). A leader that loses its connection steps down before
its next pass.

Correctness does not rest on it: every sweep and fire is an idempotent procedure that locks
what it changes, so two leaders for a moment (a partition the old leader has not noticed yet)
do no harm; the lock only keeps N processes from doing the same work N times.
"""

from __future__ import annotations

import logging
import os
import threading

import pymysql
from prometheus_client import Gauge

from orbit_shell import errors
from orbit_shell.engine import db

log = logging.getLogger("orbit.leader")

# Summed over the server's worker processes, so a scrape says whether this server leads.
LEADING = Gauge(
    "orbit_background_leader",
    "1 in the process whose sweeper and scheduler run for the database (H4)",
    registry=None,
    multiprocess_mode="livesum",
)


def lock_name(dsn: str) -> str:
    """The named lock of the database ``dsn`` names (named locks are server-wide)."""
    return f"orbit:leader:{db.parse_dsn(dsn)['database']}"[:64]


class Leadership(threading.Thread):
    """Holds or waits for the database's leader lock; ``leading()`` says which."""

    def __init__(self, dsn: str, interval: float = 1.0) -> None:
        super().__init__(name="orbit-leadership", daemon=True)
        self.dsn = dsn
        self.interval = interval
        self.name_of_lock = lock_name(dsn)
        self._leading = threading.Event()
        self.stopped = threading.Event()

    def leading(self) -> bool:
        return self._leading.is_set()

    def run(self) -> None:
        conn = None
        while not self.stopped.is_set():
            try:
                if conn is None:
                    conn = db.connect(self.dsn)
                with conn.cursor() as cur:
                    if self.leading():
                        # Still connected, so the lock is still ours, on a server that still
                        # takes writes: a primary fenced by a promotion is left for the new one.
                        cur.execute("SELECT @@global.read_only AS ro")
                        if cur.fetchone()["ro"]:
                            raise pymysql.err.OperationalError(1290, "server is read-only")
                    else:
                        cur.execute("SELECT GET_LOCK(%s, 0) AS got", (self.name_of_lock,))
                        if cur.fetchone()["got"] == 1:
                            self._lead(True)
            except (pymysql.MySQLError, errors.Unavailable) as exc:
                # Unavailable: no writable server to bid on (a switch in progress).
                if self.leading():
                    log.warning("leadership lost: %s", exc, extra={"action": "leader.lost"})
                self._lead(False)
                if conn is not None:
                    conn.close()
                conn = None
            self.stopped.wait(self.interval)
        if conn is not None:
            conn.close()  # frees the lock at once for a standby
        self._lead(False)

    def _lead(self, leading: bool) -> None:
        if leading and not self.leading():
            log.info(
                "leading the background loops",
                extra={"action": "leader.elected", "pid": os.getpid()},
            )
        if leading:
            self._leading.set()
        else:
            self._leading.clear()
        LEADING.set(1 if leading else 0)

    def stop(self) -> None:
        self.stopped.set()
