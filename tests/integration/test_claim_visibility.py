"""A claim grants only tasks a plain read sees (worker_claim_grant; sql/README.md, "Locking
reads").

Beside single submissions, the claim's `FOR UPDATE SKIP LOCKED` candidate read has returned a
task whose submission had not committed yet (MariaDB 10.11, a report's claim: about one task
in 80,000 of an e2e run with the direct producer and workers). The grant reads its candidates'
rows plainly, found none for it, and left it RUNNING with no attempt, its history and permit
naming attempt 0; the next such grant failed whole on that permit's key. The race cannot be
timed from outside, so the first tests hand the grant the candidate it then had: a row in its
candidates table that no plain read sees, listed first, beside real READY tasks; the grant is
called as worker_claim calls it, on one connection (the candidates table is the
connection's). The last runs the race itself, as long as it is given. Real procedures on a
real MariaDB."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time

import pytest

from orbit_shell.engine import db
from orbit_shell.engine.schema import routine_name
from tests.engine import Engine, submit_args

# Seconds of the concurrent run below: short in CI, where the race is rarely met; the chaos
# runner's --long gives it minutes (tests/chaos/run).
STRESS_SECONDS = float(os.environ.get("ORBIT_CHAOS_CLAIM_SECONDS", "4"))


def _grant_with_unseen_candidate(orbit_dsn, eng: Engine, session: str, report: bool) -> int:
    """worker_claim_grant of up to 10, started, with a candidate no plain read sees beside
    what its own candidate read finds; the first attempt id it granted (0: none)."""
    [row] = eng.db.query("SELECT id FROM worker_sessions WHERE public_id = %s", (session,))
    [top] = eng.db.query("SELECT COALESCE(MAX(id), 0) + 1000 AS id FROM tasks")
    conn = db.connect(orbit_dsn)
    try:
        with conn.cursor() as cur:
            if report:  # a report's claim (p_skip_keys): the results' tables are made too
                cur.execute(f"CALL {routine_name('attempt_result_tables')}()")
            cur.execute(f"CALL {routine_name('worker_claim_tables')}()")
            cur.execute(
                "INSERT INTO claim_grants_mem (task_id, priority, take, queue_id, keyed, late,"
                " attempt_number, expires_at, payload_bytes)"
                " VALUES (%s, 0, 1, %s, 0, 0, 1, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, 2)",
                (top["id"], eng.ids[eng.queue]),
            )
            cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("START TRANSACTION")
            cur.execute(
                f"CALL {routine_name('worker_claim_grant')}(%s, %s, %s, %s, 10, 0, %s, 1, @first)",
                (eng.t.namespace_id, row["id"], eng.t.application_id, session, int(report)),
            )
            cur.execute("COMMIT")
            cur.execute("SELECT COALESCE(@first, 0) AS first")
            return cur.fetchall()[0]["first"]
    finally:
        conn.close()


def _orphans(database, namespace_id: int) -> dict[str, list]:
    """Rows naming an attempt that does not exist: the namespace's tasks LEASED or RUNNING
    on no attempt of their own, permits (any namespace: a permit has none of its own), and
    the namespace's history rows."""
    return {
        "tasks": database.query(
            "SELECT t.id, t.state, t.current_attempt_id FROM tasks t"
            " LEFT JOIN attempts a ON a.id = t.current_attempt_id AND a.task_id = t.id"
            " WHERE t.namespace_id = %s AND t.state IN ('LEASED', 'RUNNING') AND a.id IS NULL",
            (namespace_id,),
        ),
        "permits": database.query(
            "SELECT p.attempt_id FROM permits p LEFT JOIN attempts a ON a.id = p.attempt_id"
            " WHERE a.id IS NULL"
        ),
        "history": database.query(
            "SELECT h.id, h.task_id, h.event FROM task_history h"
            " LEFT JOIN attempts a ON a.id = h.attempt_id"
            " WHERE h.namespace_id = %s AND h.attempt_id IS NOT NULL AND a.id IS NULL",
            (namespace_id,),
        ),
    }


@pytest.mark.parametrize("report", [False, True], ids=["claim", "report_and_claim"])
@pytest.mark.parametrize("ready", [1, 2], ids=["single_grant", "group_grant"])
def test_a_claim_grants_only_tasks_a_plain_read_sees(database, tenant, orbit_dsn, ready, report):
    eng = Engine(database, tenant)
    session, _ = eng.hello(capacity=10, keys=False)
    tasks = [eng.submit() for _ in range(ready)]

    first = _grant_with_unseen_candidate(orbit_dsn, eng, session, report)

    granted = database.query(
        "SELECT t.public_id AS task, t.state, a.id AS attempt, a.state AS attempt_state"
        " FROM tasks t JOIN attempts a ON a.id = t.current_attempt_id"
        " WHERE t.namespace_id = %s ORDER BY a.id",
        (tenant.namespace_id,),
    )
    # Every READY task granted, each with its attempt, started: the unseen candidate cost none.
    assert sorted(g["task"] for g in granted) == sorted(tasks)
    assert {(g["state"], g["attempt_state"]) for g in granted} == {("RUNNING", "RUNNING")}
    assert first == granted[0]["attempt"]
    # Nothing was written for a grant that has no attempt: no permit, no history row.
    assert _orphans(database, tenant.namespace_id) == {"tasks": [], "permits": [], "history": []}
    [s] = database.query("SELECT in_flight FROM worker_sessions WHERE public_id = %s", (session,))
    assert s["in_flight"] == ready


@pytest.mark.slow
def test_claims_beside_single_submissions_grant_every_task_with_its_attempt(
    database, tenant, orbit_dsn
):
    """The race itself: single submissions committing while two sessions report and claim in
    one transaction each, as the e2e run that met it did, for STRESS_SECONDS. Afterwards every
    task LEASED or RUNNING is on an attempt of its own, every permit has its attempt and no
    history row names an attempt that does not exist. The old grant broke this about once in
    80,000 tasks (about a minute of this run); a short run checks the invariant, a long one
    (--long) looks for the race."""
    eng = Engine(database, tenant)
    sessions = [eng.hello(capacity=100, keys=False)[0] for _ in range(2)]
    stop = time.monotonic() + STRESS_SECONDS
    errors: list[Exception] = []

    def submit(i: int) -> None:
        n = 0
        while time.monotonic() < stop:
            key = f"stress-{i}-{n}-{secrets.token_hex(4)}"
            database.call("task_submit", *submit_args(tenant.namespace_id, eng.ids[eng.queue], key))
            n += 1

    def work(session: str) -> None:
        held: list[dict] = []
        while time.monotonic() < stop:
            items = json.dumps(
                [
                    {"attempt_id": a["attempt_id"], "outcome": "succeeded", "retryable": 0,
                     "result": "", "error": ""}
                    for a in held
                ]
            )  # fmt: skip
            try:
                sets = database.call(
                    "worker_report_claim", tenant.namespace_id, session, items, 100, 1
                )
            except Exception as exc:  # noqa: BLE001 - any failure fails the test below
                errors.append(exc)
                return
            held = sets[1] if len(sets) > 1 else []

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=work, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _orphans(database, tenant.namespace_id) == {"tasks": [], "permits": [], "history": []}
