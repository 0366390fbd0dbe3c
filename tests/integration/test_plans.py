"""The batch paths' plans do not depend on InnoDB's statistics (K8).

InnoDB's row estimates lag a table that grows fast: on a new install, or after a burst of new
keys, `concurrency_resources` is estimated far smaller than it is. With such estimates MariaDB
chose full scans over primary-key lookups for joins from a batch's temporary table, and claims
and results of a batch read the whole key table once per item (bench `phases` on a new
database: 24 and 39 ms of server CPU per 10 tasks instead of ~1). The procedures now name
their join order and indexes. This test runs batches on a new database while its keys
grow, and counts the rows each batch call reads. Real MariaDB, a database of its own (the
point is a database whose statistics are young)."""

from __future__ import annotations

import itertools
import json

import pymysql
import pytest

from orbit_shell.engine import db, schema
from orbit_shell.engine.db import Database
from tests.conftest import make_tenant
from tests.engine import call_reads, submit_item, succeeded_items
from tests.helpers import LONG_TEXT

BATCH = 50
KEYS = 500
ROUNDS = 40


@pytest.fixture
def young(fresh_dsn, tmp_path):
    """A new database, migrated, with one tenant: the statistics of an empty install."""
    schema.apply(fresh_dsn)
    database = Database(fresh_dsn, pool_size=2)
    yield database, make_tenant(database, tmp_path)
    database.close()


@pytest.mark.slow
def test_batch_calls_read_per_item_not_per_key_on_a_new_database(young):
    database, tenant = young
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    names = (f"plan/{n % KEYS}" for n in itertools.count())

    def items() -> str:
        return json.dumps([submit_item(queue["id"], next(names)) for _ in range(BATCH)])

    [session], _ = database.call(
        "worker_hello",
        tenant.namespace_id,
        tenant.application_id,
        "plans",
        BATCH,
        1,
        json.dumps([tenant.queue_id]),
        "0" * 64,
        None,
    )
    sid, ns = session["session_id"], tenant.namespace_id
    most = dict.fromkeys(("submit", "claim", "start", "result"), 0)
    granted_total = 0
    conn = db.connect(database.dsn)
    try:
        # Two batches submitted per batch drained: keys gain parked tasks, so results promote.
        for _ in range(ROUNDS):
            for _ in range(2):
                reads, _ = call_reads(conn, "task_submit_many", ns, "t", items())
                most["submit"] = max(most["submit"], reads)
            reads, granted = call_reads(conn, "worker_claim", ns, sid, BATCH, 0)
            most["claim"] = max(most["claim"], reads)
            ids = [a["attempt_id"] for a in granted]
            granted_total += len(ids)
            reads, _ = call_reads(conn, "attempt_start_many", ns, sid, json.dumps(ids), 0)
            most["start"] = max(most["start"], reads)
            reads, answers = call_reads(conn, "attempt_result_many", ns, sid, succeeded_items(ids))
            most["result"] = max(most["result"], reads)
            assert [a["item_error"] for a in answers] == [None] * len(ids)
    finally:
        conn.close()
    assert granted_total == ROUNDS * BATCH  # every claim was full: the keys kept promoting
    [parked] = database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND lane = 'BLOCKED'", (ns,)
    )
    assert parked["n"] > 0
    # Measured: ~1,200-2,700 rows per call with the named plans; 27,000 (claim) and 52,000
    # (result) per call when the optimizer followed the young estimates (a scan of the key
    # table per item).
    assert all(n < 5_000 for n in most.values()), most


def session_on(database, tenant, name: str, capacity: int = 100) -> str:
    """A keyed session on the tenant's queue: its public id."""
    [session], _ = database.call(
        "worker_hello",
        tenant.namespace_id,
        tenant.application_id,
        name,
        capacity,
        1,
        json.dumps([tenant.queue_id]),
        "0" * 64,
        None,
    )
    return session["session_id"]


def disk_tables(conn) -> int:
    """Internal temporary tables this connection has made on disk so far."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
        return int(cur.fetchone()["Value"])


def items_read_apart(conn) -> int:
    """The items this connection's last long batch had read into batch_items (0: none ever,
    batch_items_read makes the table only when it fills it)."""
    with conn.cursor() as cur:
        try:
            cur.execute("SELECT COUNT(*) AS n FROM batch_items")
        except pymysql.err.ProgrammingError as exc:
            if exc.args[0] != 1146:  # no such table
                raise
            return 0
        return cur.fetchone()["n"]


@pytest.mark.parametrize("texts", ["", "short", "long"], ids=["no-texts", "texts", "long-texts"])
def test_a_batch_cycle_makes_no_on_disk_temporary_table(young, texts):
    """MariaDB's in-memory internal temporary tables hold no TEXT: a join sorted by a column of
    its second table (the submission's payload rode along) and a multi-table UPDATE carrying
    result or error text each made on-disk ones, a fifth of the call's time (and the latter
    crashed a freshly promoted MariaDB 10.11 in their error path). Submissions always carry
    a payload; results carry no text (the no-op handler's case), a result and an error, or
    long ones, whose items the procedure reads out of the batch in one statement
    (batch_items_read): the texts land the same either way."""
    database, tenant = young
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    sid, ns = session_on(database, tenant, "disk", 10), tenant.namespace_id
    pad = LONG_TEXT if texts == "long" else ""
    conn = db.connect(database.dsn)
    made = {}
    try:
        items = [submit_item(queue["id"], f"disk/{n % 3}" if n % 2 else "") for n in range(10)]
        before = disk_tables(conn)
        call_reads(conn, "task_submit_many", ns, "t", json.dumps(items))
        made["submit"] = disk_tables(conn) - before
        before = disk_tables(conn)
        _, granted = call_reads(conn, "worker_claim", ns, sid, 10, 0)
        made["claim"] = disk_tables(conn) - before
        ids = [a["attempt_id"] for a in granted]
        before = disk_tables(conn)
        call_reads(conn, "attempt_start_many", ns, sid, json.dumps(ids), 0)
        made["start"] = disk_tables(conn) - before
        outcomes = [
            {
                "attempt_id": a,
                "outcome": o,
                "retryable": r,
                "result": f'{{"n": {n}}}' + pad if texts and o == "succeeded" else "",
                "error": f"boom {n}" + pad if texts and o == "failed" else "",
            }
            for n, (a, (o, r)) in enumerate(
                zip(ids, itertools.cycle([("succeeded", 0), ("failed", 1), ("failed", 0)]))
            )
        ]
        before = disk_tables(conn)
        _, answers = call_reads(
            conn, "attempt_result_many", ns, sid, json.dumps(outcomes, ensure_ascii=False)
        )
        made["result"] = disk_tables(conn) - before
        read_apart = items_read_apart(conn)
    finally:
        conn.close()
    assert len(ids) >= 6 and [a["item_error"] for a in answers] == [None] * len(ids)
    assert made == {"submit": 0, "claim": 0, "start": 0, "result": 0}
    assert read_apart == (len(ids) if texts == "long" else 0)
    # The texts landed where attempt_result_one puts them: the attempt keeps both, the task
    # its result when it succeeded and its error otherwise (a retry's too).
    stored = database.query(
        "SELECT a.public_id, a.result AS a_result, a.error AS a_error, t.state,"
        " t.result AS t_result, t.error AS t_error"
        " FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE a.namespace_id = %s",
        (ns,),
    )
    by_id = {row["public_id"]: row for row in stored}
    for item in outcomes:
        row = by_id[item["attempt_id"]]
        result, error = item["result"] or None, item["error"] or None
        assert (row["a_result"], row["a_error"]) == (result, error)
        if item["outcome"] == "succeeded":
            assert (row["state"], row["t_result"], row["t_error"]) == ("SUCCEEDED", result, None)
        else:
            assert row["state"] in ("WAITING", "FAILED") and row["t_error"] == error
            assert row["t_result"] is None


def backdate(conn, sql: str, *args) -> int:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.rowcount


@pytest.mark.slow
def test_the_sweeper_reads_per_item_not_per_history(young):
    """lease_sweep after a mass expiry, behind a history of finished work: expired leases
    (LEASED and RUNNING), retries whose backoff ran out, waiting tasks past their deadline.
    It walked each kind by id: per item it read either every due row of the kind (a range
    sorted for its least id, quadratic in the expiry) or the table's older rows (the primary
    key scanned up to the first due row: the whole history, on every sweep)."""
    database, tenant = young
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    ns = tenant.namespace_id
    conn = db.connect(database.dsn)

    def submit(n: int, **fields) -> None:
        for at in range(0, n, 100):
            items = [submit_item(queue["id"], **fields) for _ in range(min(100, n - at))]
            database.call("task_submit_many", ns, "t", json.dumps(items))

    def claim(session: str, n: int) -> list[str]:
        [granted] = database.call("worker_claim", ns, session, n, 0)[:1]
        return [a["attempt_id"] for a in granted]

    def report(session: str, ids: list[str], outcome: str, retryable: int) -> None:
        items = [
            {"attempt_id": a, "outcome": outcome, "retryable": retryable, "result": "", "error": ""}
            for a in ids
        ]
        database.call("attempt_result_many", ns, session, json.dumps(items))

    try:
        worker = session_on(database, tenant, "history")
        submit(4000)
        while ids := claim(worker, 100):  # the history: 4,000 finished tasks and attempts
            database.call("attempt_start_many", ns, worker, json.dumps(ids), 0)
            report(worker, ids, "succeeded", 0)
        database.call("worker_goodbye", ns, worker)
        submit(180)
        # A session each, made as it claims: an idle open session would take a fair share.
        leased = session_on(database, tenant, "leased")
        assert len(claim(leased, 60)) == 60
        running = session_on(database, tenant, "running")
        started = claim(running, 60)
        database.call("attempt_start_many", ns, running, json.dumps(started), 0)
        retried = session_on(database, tenant, "retried")
        backed_off = claim(retried, 60)
        database.call("attempt_start_many", ns, retried, json.dumps(backed_off), 0)
        report(retried, backed_off, "failed", 1)
        submit(60, deadline_seconds=3600)
        # Past the sweep's clock: 120 leases, 60 backoffs, 60 deadlines of waiting tasks.
        expired = backdate(
            conn,
            "UPDATE attempts SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE state IN ('LEASED', 'RUNNING')",
        )
        due = backdate(
            conn,
            "UPDATE tasks SET available_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE lane = 'DELAYED'",
        )
        late = backdate(
            conn,
            "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE deadline_at IS NOT NULL",
        )
        assert (expired, due, late) == (120, 60, 60)
        reads, [swept] = call_reads(conn, "lease_sweep", 100)
        assert swept == {"recovered": 100, "promoted": 60, "expired": 60}
        reads_next, [rest] = call_reads(conn, "lease_sweep", 100)
        assert rest == {"recovered": 20, "promoted": 0, "expired": 0}
    finally:
        conn.close()
    per_item = (reads + reads_next) / 240
    assert per_item < 30, (reads, reads_next)


@pytest.mark.slow
def test_a_claim_and_its_probe_read_per_queue_not_per_history(young):
    """The claim's recovery guard and session_ready ask whether a queue has an expired lease
    or a due backoff. Written as a join with `state IN ('LEASED', 'RUNNING') AND
    lease_expires_at <= now`, the attempts index was entered by queue alone and the read went
    through every attempt the queue ever had: an empty claim behind 2,000 finished tasks read
    2,026 rows, and so did every probe of a waiting worker, every 20-50 ms."""
    database, tenant = young
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    ns = tenant.namespace_id
    conn = db.connect(database.dsn)

    try:
        worker = session_on(database, tenant, "history")
        for _ in range(15):  # the history: 1,500 finished tasks and attempts on the queue
            items = [submit_item(queue["id"]) for _ in range(100)]
            database.call("task_submit_many", ns, "t", json.dumps(items))
            [granted] = database.call("worker_claim", ns, worker, 100, 0)[:1]
            ids = [a["attempt_id"] for a in granted]
            database.call("attempt_start_many", ns, worker, json.dumps(ids), 0)
            database.call("attempt_result_many", ns, worker, succeeded_items(ids))
        # Work in flight that has not expired: a leased and a running attempt.
        two = [submit_item(queue["id"]) for _ in range(2)]
        database.call("task_submit_many", ns, "t", json.dumps(two))
        [held] = database.call("worker_claim", ns, worker, 2, 0)[:1]
        database.call("attempt_start_many", ns, worker, json.dumps([held[0]["attempt_id"]]), 0)
        waiting = session_on(database, tenant, "waiting")
        claim_reads, granted = call_reads(conn, "worker_claim", ns, waiting, 10, 0)
        probe_reads, [ready] = call_reads(conn, "session_ready", ns, waiting)
        assert granted == [] and ready["ready"] == 0
        # An expired lease is still found, and recovered by the next claim.
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE attempts SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
                "WHERE public_id = %s",
                (held[1]["attempt_id"],),
            )
        _, [ready] = call_reads(conn, "session_ready", ns, waiting)
        assert ready["ready"] == 1
        recover_reads, granted = call_reads(conn, "worker_claim", ns, waiting, 10, 0)
        assert len(granted) == 1  # the recovered task, claimed again
    finally:
        conn.close()
    assert max(claim_reads, probe_reads, recover_reads) < 100, (
        claim_reads,
        probe_reads,
        recover_reads,
    )


@pytest.mark.parametrize("count, payload_chars", [(4, 10), (10, 1500)], ids=["short", "long"])
def test_a_batch_sent_again_answers_every_item_as_a_replay(young, count, payload_chars):
    """A batch of submissions sent again (a client's retry after a lost answer) takes the item
    loop whole: every item is a replay of its first acceptance. A long batch's loop reads its
    items from batch_items, read in one statement, instead of scanning the batch for each
    (batch_items_read: once the loop's reads x the batch's bytes pass 16 KiB); either way the
    answers are the first call's tasks, not created."""
    database, tenant = young
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    items = [
        submit_item(
            queue["id"],
            f"again/{n % 3}" if n % 2 else "",
            payload=json.dumps({"p": "é" * payload_chars, "n": n}, ensure_ascii=False),
        )
        for n in range(count)
    ]
    body = json.dumps(items, ensure_ascii=False)
    conn = db.connect(database.dsn)
    try:
        _, first = call_reads(conn, "task_submit_many", tenant.namespace_id, "t", body)
        _, again = call_reads(conn, "task_submit_many", tenant.namespace_id, "t", body)
        read_apart = items_read_apart(conn)
    finally:
        conn.close()
    assert [(r["item_error"], r["created"]) for r in first] == [(None, 1)] * count
    assert [(r["item_error"], r["created"]) for r in again] == [(None, 0)] * count
    assert [r["task_id"] for r in again] == [r["task_id"] for r in first]
    assert read_apart == (count if count * len(body.encode()) > 16384 else 0)
    assert (count, read_apart) in ((4, 0), (10, 10))  # one batch on each side of the bound
    [stored] = database.query(
        'SELECT COUNT(*) AS n, SUM(payload LIKE \'{"p": "é%%\') AS kept FROM tasks'
        " WHERE namespace_id = %s",
        (tenant.namespace_id,),
    )
    assert (stored["n"], stored["kept"]) == (count, count)
