"""Deadlocks forced into each procedure (issue 8, item 2). A blocker transaction makes itself
the heavier one (so InnoDB picks the procedure as the victim), holds the row the procedure locks
second, then asks for the row the procedure holds first. The procedure gets 1213 inside, its
EXIT HANDLER rolls it back, and the shell retries it whole once the blocker has gone."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from orbit_shell import db
from orbit_shell.db import Database
from tests.engine import Engine


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


def _row(database, sql, *args):
    return database.query(sql, args)[0]["id"]


def _setup(eng, database):
    """Everything the cases need: a session with a RUNNING, a LEASED and a NEEDS_REVIEW attempt,
    a WAITING task, and a known worker identity."""
    worker = "dl-" + secrets.token_hex(4)
    session, _ = eng.hello(capacity=8, worker=worker)
    running, leased, review = eng.submit("dl/a"), eng.submit("dl/b"), eng.submit("dl/c")
    waiting = eng.submit("dl/a")
    got = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 8)}
    eng.start(session, got[running])
    eng.start(session, got[review])
    eng.result(session, got[review], "unknown")
    ids = {
        r["public_id"]: (r["id"], r["task_id"])
        for r in database.query(
            "SELECT public_id, id, task_id FROM attempts WHERE public_id IN (%s, %s)",
            (got[running], got[leased]),
        )
    }
    s_extra = {"running_attempt": ids[got[running]][0], "leased_task": ids[got[leased]][1]}
    return {
        "session": session,
        "worker": worker,
        "running": got[running],
        "leased": got[leased],
        "review": review,
        "waiting": waiting,
        "app": eng.t.application_id,
        "queue": eng.ids[eng.queue],
        **s_extra,
    }


# procedure -> (first lock, second lock, args); locks are (table, id getter)
APP = ("SELECT id FROM applications WHERE id = %s FOR UPDATE", "app")
QUEUE = ("SELECT id FROM queues WHERE id = %s FOR UPDATE", "queue")


def _cases(eng, s):
    ns = eng.t.namespace_id
    attempt = lambda key: ("SELECT id FROM attempts WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    task = lambda key: ("SELECT id FROM tasks WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    return {
        "task_submit": (
            APP,
            QUEUE,
            (
                ns,
                s["queue"],
                "dl-" + secrets.token_hex(4),
                "0" * 64,
                "h",
                "v1",
                "v1",
                "{}",
                "",
                "dl/new",
                5,
                None,
                None,
                "t",
                None,
                None,
                None,
            ),
        ),
        "worker_claim": (APP, QUEUE, (ns, s["session"], 1)),
        "worker_hello": (
            APP,
            ("SELECT id FROM worker_sessions WHERE worker_id = %s FOR UPDATE", "worker"),
            (ns, eng.t.application_id, s["worker"], 8, 1, f'["{eng.queue}"]', "0" * 64),
        ),
        "attempt_result": (
            APP,
            attempt("running"),
            (ns, s["session"], s["running"], "succeeded", 0, None, None),
        ),
        "task_cancel": (APP, task("waiting"), (ns, s["waiting"], "t")),
        "task_resolve": (APP, task("review"), (ns, s["review"], "FAILED", "t", None)),
        "queue_set_state": (APP, QUEUE, (ns, eng.queue, "PAUSED")),
        "attempt_start": (
            attempt("leased"),
            # Only the tasks row: a join FOR UPDATE would lock the attempt as well.
            ("SELECT id FROM tasks WHERE id = %s FOR UPDATE", "leased_task"),
            (ns, s["session"], s["leased"]),
        ),
        "attempt_renew": (
            attempt("running"),
            ("SELECT id FROM permits WHERE attempt_id = %s FOR UPDATE", "running_attempt"),
            (ns, s["session"], s["running"]),
        ),
    }


@pytest.mark.parametrize(
    "procedure",
    [
        "task_submit",
        "worker_claim",
        "worker_hello",
        "attempt_result",
        "task_cancel",
        "task_resolve",
        "queue_set_state",
        "attempt_start",
        "attempt_renew",
    ],
)
def test_deadlock_victim_procedure_is_retried_whole(
    procedure, database, tenant, orbit_dsn, ballast
):
    eng = Engine(database, tenant)
    s = _setup(eng, database)
    (first_sql, first_key), (second_sql, second_key), args = _cases(eng, s)[procedure]
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
        for _ in range(100):  # wait until the procedure holds its first lock and waits
            time.sleep(0.02)
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
