"""Lock-wait timeouts forced into each procedure (issue 8, item 2): a second connection holds
the row the procedure locks first; the call fails with 1205 inside the procedure, is rolled back
by its EXIT HANDLER, and the shell retries it whole once the row is free."""

from __future__ import annotations

import json
import secrets
import threading

import pytest

from orbit_shell import db
from orbit_shell.db import Database
from tests.engine import Engine


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


def _shell(dsn: str, blocker: Blocked) -> Database:
    shell = Database(dsn, sleep=blocker.sleep)
    conn = db.connect(dsn, init_command="SET time_zone = '+00:00', innodb_lock_wait_timeout = 1")
    shell._idle.put_nowait(conn)
    return shell


APP_LOCK = "SELECT id FROM applications WHERE id = %s FOR UPDATE"
ATTEMPT_LOCK = "SELECT id FROM attempts WHERE public_id = %s FOR UPDATE"


@pytest.fixture
def eng(database, tenant):
    return Engine(database, tenant)


def _prepared(eng):
    """A task with a RUNNING attempt, a NEEDS_REVIEW task and a WAITING one."""
    session, _ = eng.hello(capacity=4)
    running = eng.submit("lw/run")
    review = eng.submit("lw/review")
    waiting = eng.submit("lw/run")
    granted = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 4)}
    eng.start(session, granted[running])
    eng.start(session, granted[review])
    eng.result(session, granted[review], "unknown")
    return session, granted[running], review, waiting


CASES = {
    "task_submit": (
        APP_LOCK,
        lambda e, s, a, r, w: (
            e.t.namespace_id,
            e.ids[e.queue],
            "lw-" + secrets.token_hex(4),
            "0" * 64,
            "h",
            "v1",
            "v1",
            "{}",
            "",
            "lw/new",
            5,
            None,
            None,
            "t",
            None,
            None,
            None,
        ),
    ),
    "worker_claim": (APP_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, s, 1)),
    "worker_hello": (
        APP_LOCK,
        lambda e, s, a, r, w: (
            e.t.namespace_id,
            e.t.application_id,
            "lw-" + secrets.token_hex(4),
            1,
            1,
            json.dumps([e.queue]),
            "0" * 64,
        ),
    ),
    "attempt_result": (
        APP_LOCK,
        lambda e, s, a, r, w: (e.t.namespace_id, s, a, "succeeded", 0, None, None),
    ),
    "task_cancel": (APP_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, w, "t")),
    "task_resolve": (APP_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, r, "FAILED", "t", None)),
    "queue_set_state": (APP_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, e.queue, "PAUSED")),
    "attempt_start": (ATTEMPT_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, s, a)),
    "attempt_renew": (ATTEMPT_LOCK, lambda e, s, a, r, w: (e.t.namespace_id, s, a)),
}


@pytest.mark.parametrize("procedure", sorted(CASES))
def test_lock_wait_timeout_is_retried_whole(procedure, eng, orbit_dsn):
    session, attempt, review, waiting = _prepared(eng)
    lock_sql, make_args = CASES[procedure]
    lock_arg = eng.t.application_id if lock_sql is APP_LOCK else attempt
    blocker = Blocked(orbit_dsn, lock_sql, (lock_arg,))
    shell = _shell(orbit_dsn, blocker)
    result = shell.call(procedure, *make_args(eng, session, attempt, review, waiting))
    assert blocker.retries >= 1, "the lock wait never happened"
    assert result is not None
    shell.close()
