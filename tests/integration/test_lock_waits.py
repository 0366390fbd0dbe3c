"""Lock-wait timeouts forced into each procedure: a second connection holds
the row the procedure locks first; the call fails with 1205 inside the procedure, is rolled back
by its EXIT HANDLER, and the shell retries it whole once the row is free."""

from __future__ import annotations

import threading

import pytest

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from tests.engine import Engine
from tests.procedure_cases import PROCEDURES, QUOTA_CASES, SINGLE_LOCK, cases, setup


class Blocked:
    """Holds a row lock until the shell's first retry, then lets go."""

    def __init__(self, dsn: str, sql: str, args) -> None:
        self.conn = db.connect(dsn, autocommit=False)
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
        self.retries = 0
        self.lock = threading.Lock()

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.retries += 1
            if self.conn.open:
                self.conn.rollback()
                self.conn.close()


@pytest.mark.parametrize("procedure", PROCEDURES + SINGLE_LOCK)
def test_lock_wait_timeout_is_retried_whole(procedure, database, tenant, orbit_dsn):
    eng = Engine(database, tenant)
    s = setup(eng, database)
    if procedure in QUOTA_CASES:
        database.call("application_set_quota", eng.t.application, 1000, 1000)
    (first_sql, first_key), _, args = cases(eng, s)[procedure]
    blocker = Blocked(orbit_dsn, first_sql, (s[first_key],))
    if procedure == "lease_sweep":
        # Something of this application for the sweep to lock, expired only once its row is
        # held: a sweeper of a server the suite runs meanwhile could recover it first.
        eng.expire(s["running"])
    shell = Database(orbit_dsn, sleep=blocker.sleep)
    conn = db.connect(
        orbit_dsn, init_command="SET time_zone = '+00:00', innodb_lock_wait_timeout = 1"
    )
    shell._idle.put_nowait(conn)
    try:
        result = shell.call(procedure, *args)
        retries = blocker.retries
    finally:
        blocker.sleep(0)  # release the row whatever happened
        shell.close()
    assert retries >= 1, "the lock wait never happened"
    assert result is not None
