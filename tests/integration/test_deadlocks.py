"""Deadlocks forced into each procedure. A blocker transaction makes itself
the heavier one (so InnoDB picks the procedure as the victim), holds the row the procedure locks
second, then asks for the row the procedure holds first. The procedure gets 1213 inside, its
EXIT HANDLER rolls it back, and the shell retries it whole once the blocker has gone."""

from __future__ import annotations

import threading
import time

import pytest

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from tests.engine import Engine
from tests.procedure_cases import PROCEDURES, QUOTA_CASES, cases, setup


@pytest.fixture(scope="module")
def ballast(server):
    """Rows in another database for the blocker to modify, so it outweighs the procedure."""
    dsn = server.create_database("deadlock_ballast")
    conn = db.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE ballast (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
        cur.execute("INSERT INTO ballast VALUES " + ",".join(f"({i}, 0)" for i in range(200)))
    conn.close()
    yield "deadlock_ballast"
    server.drop_database("deadlock_ballast")


@pytest.mark.parametrize("procedure", PROCEDURES)
def test_deadlock_victim_procedure_is_retried_whole(
    procedure, database, tenant, orbit_dsn, ballast
):
    eng = Engine(database, tenant)
    s = setup(eng, database)
    if procedure in QUOTA_CASES:
        database.call("application_set_quota", eng.t.application, 1000, 1000)
    (first_sql, first_key), (second_sql, second_key), args = cases(eng, s)[procedure]
    retried, released = threading.Event(), threading.Event()

    def on_retry(seconds):  # the shell's backoff sleep: the blocker lets go before the retry
        retried.set()
        released.wait(10)

    shell = Database(orbit_dsn, sleep=on_retry)
    blocker = db.connect(orbit_dsn, autocommit=False)
    out = {}
    try:
        with blocker.cursor() as cur:
            cur.execute(f"UPDATE {ballast}.ballast SET n = n + 1")  # the heavier transaction
            cur.execute(second_sql, (s[second_key],))
        conn = db.connect(orbit_dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID() AS id")
            victim = cur.fetchone()["id"]
        shell._idle.put_nowait(conn)

        def call():
            try:
                out["result"] = shell.call(procedure, *args)
            except Exception as exc:  # noqa: BLE001 - asserted below
                out["error"] = exc

        thread = threading.Thread(target=call)
        thread.start()
        # Wait until the procedure holds its first lock and waits. InnoDB refreshes
        # information_schema.innodb_trx only when it was last read over 0.1 s before.
        for _ in range(20):
            time.sleep(0.15)
            waiting = database.query(
                "SELECT COUNT(*) AS n FROM information_schema.innodb_trx "
                "WHERE trx_mysql_thread_id = %s AND trx_state = "
                "'LOCK WAIT'",
                (victim,),
            )
            if waiting[0]["n"]:
                break
        with blocker.cursor() as cur:
            cur.execute(first_sql, (s[first_key],))  # closes the cycle: InnoDB picks a victim
        assert retried.wait(10), f"the procedure was not the deadlock victim: {out}"
    finally:
        blocker.rollback()
        blocker.close()
        released.set()
    thread.join(15)
    assert "error" not in out, out.get("error")
    assert out["result"] is not None
    shell.close()
