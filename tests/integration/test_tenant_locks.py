"""One tenant is not one lock: without limits no writer locks a row that all of an
application's or a queue's tasks share, and with limits set the writers lock those rows and the
limits hold exactly (sql/README.md, "Limits without a shared lock"). Real procedures on a real
MariaDB; the blocker is a second connection holding the rows."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading

import pytest

from orbit_shell import errors
from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from tests.engine import (
    KEY_ROW_LOCK,
    Engine,
    queue_counts,
    submit_args,
    submit_item,
    succeeded_items,
)


class LockWait(AssertionError):
    """A call met a lock wait: the shell was about to retry it."""


def _no_retry(seconds: float) -> None:
    raise LockWait("the call waited for a lock (1205) and would be retried")


def _impatient(dsn: str) -> Database:
    """A shell whose connections give up a lock wait after a second and never retry."""
    shell = Database(dsn, pool_size=4, sleep=_no_retry)
    for _ in range(4):
        shell._idle.put_nowait(
            db.connect(dsn, init_command="SET time_zone = '+00:00', innodb_lock_wait_timeout = 1")
        )
    return shell


class Held:
    """Rows held FOR UPDATE by another transaction until released."""

    def __init__(self, dsn: str, *statements: tuple[str, tuple]) -> None:
        self.conn = db.connect(dsn, autocommit=False)
        with self.conn.cursor() as cur:
            for sql, args in statements:
                cur.execute(sql, args)

    def release(self) -> None:
        if self.conn.open:
            self.conn.rollback()
            self.conn.close()


@contextlib.contextmanager
def _key_row_held(dsn: str, namespace_id: int, key: str):
    """An impatient shell (``_impatient``) while another transaction holds ``key``'s row."""
    shell = _impatient(dsn)
    hold = Held(dsn, (KEY_ROW_LOCK, (namespace_id, key)))
    try:
        yield shell
    finally:
        hold.release()
        shell.close()


def _tenant_rows(eng: Engine) -> list[tuple[str, tuple]]:
    return [
        ("SELECT id FROM applications WHERE id = %s FOR UPDATE", (eng.t.application_id,)),
        ("SELECT id FROM queues WHERE namespace_id = %s FOR UPDATE", (eng.t.namespace_id,)),
    ]


def test_no_tenant_row_is_locked_by_any_write_path_without_limits(tenant, database, orbit_dsn):
    """Submit, batch submit, claim, start, renew, result (single, batch, with a claim), cancel
    (parked, ready, leased), resolve and every sweep run to their end while another
    transaction holds the application row and every queue row of the tenant."""
    setup = Engine(database, tenant)
    session, _ = setup.hello(capacity=20)  # hello locks the application row: not a task path
    other, _ = setup.hello(capacity=20)
    setup.unseen(other)  # not an idle node the first claim would share its burst with
    shell = _impatient(orbit_dsn)
    eng = Engine(shell, tenant)
    ns = tenant.namespace_id
    held = Held(orbit_dsn, *_tenant_rows(eng))
    try:
        first = eng.submit("tl/a")
        parked = eng.submit("tl/a")
        for _ in range(4):
            eng.submit()
        items = [
            submit_item(setup.ids[setup.queue], key, idempotency_key=secrets.token_hex(8))
            for key in ("tl/b", "tl/b", "tl/c", "")
        ]
        shell.call("task_submit_many", ns, "t", json.dumps(items))
        granted = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 6)}
        assert first in granted and parked not in granted
        ids = list(granted.values())
        eng.start(session, ids[0])
        shell.call("attempt_start_many", ns, session, json.dumps(ids[1:4]), 0)
        eng.renew(session, ids[1])
        eng.result(session, granted[first])  # frees tl/a: the parked task is promoted
        eng.result(session, ids[1], "failed", retryable=1)
        eng.result(session, ids[2], "unknown")
        shell.call("worker_report_claim", ns, session, succeeded_items([ids[3]]), 2, 0)
        leased = eng.claim(other, 2)
        assert leased, "nothing left to claim"
        shell.call("task_cancel", ns, leased[0]["task_id"], "t")  # LEASED: permits released
        behind = eng.submit("tl/a")  # parked behind the promoted candidate
        shell.call("task_cancel", ns, behind, "t")
        shell.call("task_cancel", ns, eng.submit(), "t")  # READY
        [review] = database.query(
            "SELECT t.public_id FROM tasks t JOIN attempts a ON a.task_id = t.id "
            "WHERE a.public_id = %s",
            (ids[2],),
        )
        shell.call("task_resolve", ns, review["public_id"], "WAITING", "t", None)
        # The sweeps: an expired lease, a backoff run out, a deadline passed while waiting.
        if len(leased) > 1:
            setup.expire(leased[1]["attempt_id"])
        [retried] = database.query(
            "SELECT t.public_id FROM tasks t JOIN attempts a ON a.task_id = t.id "
            "WHERE a.public_id = %s",
            (ids[1],),
        )
        setup.due(retried["public_id"])
        late = eng.submit("tl/late", deadline=3600)
        setup.force(
            "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE public_id = %s",
            late,
        )
        [[swept]] = shell.call("lease_sweep", 100)
        assert swept["expired"] >= 1 and swept["promoted"] >= 1
        assert setup.task(late)["state"] == "DEADLINE_EXCEEDED"
    finally:
        held.release()
        shell.close()
    assert setup.task(parked)["lane"] != "BLOCKED"  # promoted when tl/a was freed


def test_with_a_quota_the_writers_lock_the_application_row(tenant, database, orbit_dsn):
    """The control: the same hold makes a submission wait once the application has a quota
    (the test above would see a lock), and a claim on a queue with a permit limit waits on
    that queue's row."""
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create(max_concurrency=2)
    eng.submit(queue=queue)
    session, _ = eng.hello(queues=[queue], capacity=4)
    shell = _impatient(orbit_dsn)
    held = Held(orbit_dsn, ("SELECT id FROM queues WHERE id = %s FOR UPDATE", (eng.ids[queue],)))
    try:
        with pytest.raises(LockWait):
            Engine(shell, tenant).claim(session, 2)
    finally:
        held.release()
    database.call("application_set_quota", tenant.application, None, 1000)
    held = Held(orbit_dsn, *_tenant_rows(eng)[:1])
    try:
        with pytest.raises(LockWait):
            Engine(shell, tenant).submit()
    finally:
        held.release()
        shell.close()


def test_batches_lock_the_rows_of_their_limited_queues_only(tenant, database, orbit_dsn):
    """The control for the batch paths (queues_lock): a batch of submissions naming a queue
    with max_unfinished, and a batch of results or a report of an attempt on a queue with
    max_concurrency, wait on that queue's row; the same batches on the namespace's unlimited
    queue do not."""
    eng = Engine(database, tenant)
    ns = tenant.namespace_id
    limited, _ = eng.queue_create(max_concurrency=5)
    [[made]] = database.call("queue_create", ns, tenant.application_id, "unfinished-5", None, 5,
                             3, 30, 1, 300)  # fmt: skip
    [counted] = database.query("SELECT id FROM queues WHERE public_id = %s", (made["queue_id"],))
    eng.submit(queue=limited)
    eng.submit()
    session, _ = eng.hello(queues=[limited, eng.queue], capacity=4)
    attempts = {eng.task(a["task_id"])["queue_id"]: a["attempt_id"] for a in eng.claim(session)}
    shell = _impatient(orbit_dsn)

    def held(queue_id: int) -> Held:
        return Held(orbit_dsn, ("SELECT id FROM queues WHERE id = %s FOR UPDATE", (queue_id,)))

    hold = held(counted["id"])
    try:
        with pytest.raises(LockWait):
            shell.call("task_submit_many", ns, "t", json.dumps([submit_item(counted["id"])]))
        shell.call("task_submit_many", ns, "t", json.dumps([submit_item(eng.ids[eng.queue])]))
    finally:
        hold.release()
    hold = held(eng.ids[limited])
    try:
        for call, args in (
            ("attempt_result_many", ()),
            ("worker_report_claim", (1, 0)),
        ):
            with pytest.raises(LockWait):
                shell.call(call, ns, session, succeeded_items([attempts[eng.ids[limited]]]), *args)
        shell.call(
            "attempt_result_many", ns, session, succeeded_items([attempts[eng.ids[eng.queue]]])
        )
    finally:
        hold.release()
        shell.close()


def test_a_report_claims_the_keys_its_results_promoted_and_skips_a_key_another_holds(
    tenant, database, orbit_dsn
):
    """K6/K8 and the lock order: while another transaction holds key B's row, a report whose
    result frees key A claims A's promoted next task without waiting (its own key row, no
    keys_lock: a hot key's turn), and a report whose claim also finds B's READY candidate
    still grants A's and leaves B's READY for a later claim (keys_lock, SKIP LOCKED)."""
    eng = Engine(database, tenant)
    ns = tenant.namespace_id
    key_a, key_b = "tl/a-" + secrets.token_hex(3), "tl/b-" + secrets.token_hex(3)
    tasks_a = [eng.submit(key_a) for _ in range(3)]  # one READY, two parked behind it
    task_b = eng.submit(key_b)
    session, _ = eng.hello(capacity=3)
    [first] = eng.claim(session, 1)
    assert first["task_id"] == tasks_a[0]
    eng.start(session, first["attempt_id"])
    with _key_row_held(orbit_dsn, ns, key_b) as shell:
        _, [second] = shell.call(
            "worker_report_claim", ns, session, succeeded_items([first["attempt_id"]]), 1, 0
        )[:2]
        assert second["task_id"] == tasks_a[1]
        assert int(second["concurrency_token"]) == int(first["concurrency_token"]) + 1
        eng.start(session, second["attempt_id"])
        _, granted = shell.call(
            "worker_report_claim", ns, session, succeeded_items([second["attempt_id"]]), 2, 0
        )[:2]
        assert [g["task_id"] for g in granted] == [tasks_a[2]]
        assert eng.task(task_b)["lane"] == "READY"
    [later] = eng.claim(session, 2)
    assert later["task_id"] == task_b


def test_a_report_whose_one_keyed_candidate_another_holds_leaves_it_ready(
    tenant, database, orbit_dsn
):
    """The same with one key to lock, which keys_lock takes by a statement of its own: a
    report that frees no key finds only B's READY candidate while another transaction holds
    B's row, and grants nothing rather than wait for it."""
    eng = Engine(database, tenant)
    ns = tenant.namespace_id
    key_b = "tl/b-" + secrets.token_hex(3)
    session, _ = eng.hello(capacity=2)
    eng.submit()
    [plain] = eng.claim(session, 1)
    eng.start(session, plain["attempt_id"])
    task_b = eng.submit(key_b)
    with _key_row_held(orbit_dsn, ns, key_b) as shell:
        _, granted = shell.call(
            "worker_report_claim", ns, session, succeeded_items([plain["attempt_id"]]), 1, 0
        )[:2]
        assert granted == []
        assert eng.task(task_b)["lane"] == "READY"
    [later] = eng.claim(session, 1)
    assert later["task_id"] == task_b


def test_a_report_of_an_unkeyed_result_locks_no_key_not_even_one_named_null(
    tenant, database, orbit_dsn
):
    """An unkeyed attempt has no key: a report of its result alone locks no key row. Its key
    list once held a JSON null, which keys_lock read as the key "null" and so waited here for
    the row of a key of that name that another transaction holds."""
    eng = Engine(database, tenant)
    ns = tenant.namespace_id
    session, _ = eng.hello(capacity=2)
    keyed = eng.submit("null")
    plain = eng.submit()
    granted = {g["task_id"]: g["attempt_id"] for g in eng.claim(session, 2)}
    assert set(granted) == {keyed, plain}
    eng.start(session, granted[plain])
    with _key_row_held(orbit_dsn, ns, "null") as shell:
        shell.call("attempt_result_many", ns, session, succeeded_items([granted[plain]]))
    assert eng.task(plain)["state"] == "SUCCEEDED"


# Exact limits under concurrency ---------------------------------------------------------------


def _submitters(dsn: str, eng: Engine, threads: int, stop: threading.Event, tally: dict):
    """Threads submitting one task per call until ``stop``, each refused call counted."""

    def loop() -> None:
        shell = Database(dsn, pool_size=1)
        mine = Engine(shell, eng.t)
        try:
            while not stop.is_set():
                try:
                    mine.submit()
                    with tally["lock"]:
                        tally["accepted"] += 1
                except errors.OrbitError as exc:
                    assert exc.code == "QUOTA_EXCEEDED", exc
                    with tally["lock"]:
                        tally["refused"] += 1
        finally:
            shell.close()

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    return workers


def _unfinished(database, eng: Engine) -> tuple[int, int]:
    """(tasks of the application not final, counted; its counter)."""
    [row] = database.query(
        "SELECT (SELECT COUNT(*) FROM tasks WHERE namespace_id = %s AND state IN "
        "('WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW')) AS n, a.unfinished_tasks "
        "FROM applications a WHERE a.id = %s",
        (eng.t.namespace_id, eng.t.application_id),
    )
    return int(row["n"]), int(row["unfinished_tasks"])


def _run_until_refused(database, eng, orbit_dsn, set_limit, limit: int) -> tuple[int, int]:
    """Submitters run unlimited; once 20 tasks are in, ``set_limit(limit)`` while they go on;
    they stop after 200 refusals. Returns the unfinished count and the counter."""
    stop, tally = threading.Event(), {"lock": threading.Lock(), "accepted": 0, "refused": 0}
    workers = _submitters(orbit_dsn, eng, 6, stop, tally)
    try:
        for _ in range(2000):
            if tally["accepted"] >= 20:
                break
            threading.Event().wait(0.005)
        set_limit(limit)
        for _ in range(4000):
            if tally["refused"] >= 200:
                break
            threading.Event().wait(0.005)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert tally["refused"] >= 200, tally
    return _unfinished(database, eng)


def test_k5_a_quota_set_under_load_is_exact(tenant, database, orbit_dsn):
    """A quota set while six writers submit, each of which read "no limit" until the change:
    every writer in flight then is waited for and counted, so the backlog ends at the limit,
    not one above it, and the counter equals the rows."""
    eng = Engine(database, tenant)

    def set_limit(limit: int) -> None:
        database.call("application_set_quota", tenant.application, None, limit)

    assert _run_until_refused(database, eng, orbit_dsn, set_limit, 80) == (80, 80)


def test_the_exactness_check_sees_a_quota_set_without_waiting_for_writers(
    tenant, database, orbit_dsn
):
    """The negative control of the test above: the same quota written straight to the rows
    (no gates held, no count) leaves the writers' earlier tasks uncounted, and the check
    sees the backlog pass the limit."""
    eng = Engine(database, tenant)

    def set_limit(limit: int) -> None:
        eng.force(
            "UPDATE applications SET max_unfinished = %s WHERE id = %s",
            limit,
            tenant.application_id,
        )
        eng.force(
            "UPDATE namespace_gates SET unfinished_limited = 1 WHERE namespace_id = %s",
            tenant.namespace_id,
        )

    count, counter = _run_until_refused(database, eng, orbit_dsn, set_limit, 80)
    assert count > 80 and counter == 80


def _claimers(dsn: str, eng: Engine, sessions: list[str], rounds: int) -> int:
    """Every session claims at once, ``rounds`` times each; the attempts granted."""
    granted, lock, barrier = [0], threading.Lock(), threading.Barrier(len(sessions))

    def loop(session: str) -> None:
        shell = Database(dsn, pool_size=1)
        try:
            barrier.wait()
            for _ in range(rounds):
                got = len(Engine(shell, eng.t).claim(session, 4))
                with lock:
                    granted[0] += got
        finally:
            shell.close()

    threads = [threading.Thread(target=loop, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return granted[0]


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_k5_concurrent_claims_never_pass_the_active_quota(tenant, database, orbit_dsn, keyed):
    """Eight sessions claim together against an application quota of 5 with 60 tasks
    waiting: exactly 5 attempts are granted, however the claims interleave."""
    eng = Engine(database, tenant)
    database.call("application_set_quota", tenant.application, 5, None)
    for i in range(60):
        eng.submit(f"aq/{i}" if keyed else "")
    sessions = [eng.hello(capacity=8)[0] for _ in range(8)]
    assert _claimers(orbit_dsn, eng, sessions, 3) == 5
    [row] = database.query(
        "SELECT a.active_attempts, (SELECT COUNT(*) FROM attempts WHERE namespace_id = %s "
        "AND state IN ('LEASED', 'RUNNING')) AS n FROM applications a WHERE a.id = %s",
        (tenant.namespace_id, tenant.application_id),
    )
    assert row == {"active_attempts": 5, "n": 5}


def test_k5_concurrent_claims_never_pass_a_queue_permit_limit(tenant, database, orbit_dsn):
    """The same for a queue's max_concurrency: 3 permits, eight sessions, 40 tasks."""
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create(max_concurrency=3)
    for _ in range(40):
        eng.submit(queue=queue)
    sessions = [eng.hello(queues=[queue], capacity=8)[0] for _ in range(8)]
    assert _claimers(orbit_dsn, eng, sessions, 3) == 3
    assert queue_counts(database, eng.ids[queue])["active_attempts"] == 3
    [row] = database.query("SELECT active_attempts FROM queues WHERE id = %s", (eng.ids[queue],))
    assert row["active_attempts"] == 3


def test_k1_concurrent_submissions_of_one_idempotency_key_make_one_task(
    tenant, database, orbit_dsn
):
    """Without the application row to queue them, two submissions of one Idempotency-Key can
    both find no record; the later one's insert is a duplicate, answered as a deadlock, and
    the shell's retry answers the first one's task."""
    eng = Engine(database, tenant)
    idem, answers, barrier = secrets.token_hex(8), [], threading.Barrier(8)

    def submit() -> None:
        shell = Database(orbit_dsn, pool_size=1)
        try:
            barrier.wait()
            [[row]] = shell.call(
                "task_submit", *submit_args(tenant.namespace_id, eng.ids[eng.queue], idem, "ik/1")
            )
            answers.append((row["task_id"], row["created"]))
        finally:
            shell.close()

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == 8
    assert len({task for task, _ in answers}) == 1
    assert sorted(created for _, created in answers) == [0] * 7 + [1]
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND idempotency_key = %s",
        (tenant.namespace_id, idem),
    ) == [{"n": 1}]


def test_a_writer_waits_only_when_every_gate_is_held(tenant, database, orbit_dsn):
    """What a quota change or a queue pause holds: every gate of the namespace. A writer then
    waits (and gives up at its lock-wait timeout); one gate free is enough for it."""
    shell = _impatient(orbit_dsn)
    gates = "SELECT slot FROM namespace_gates WHERE namespace_id = %s"
    held = Held(orbit_dsn, (gates + " FOR UPDATE", (tenant.namespace_id,)))
    try:
        with pytest.raises(LockWait):
            Engine(shell, tenant).submit()
    finally:
        held.release()
    held = Held(orbit_dsn, (gates + " AND slot > 0 FOR UPDATE", (tenant.namespace_id,)))
    try:
        Engine(shell, tenant).submit()
    finally:
        held.release()
        shell.close()


def test_k2_keys_of_any_text_are_locked_in_one_statement(tenant, database):
    """A claim of several keyed candidates locks their key rows in one statement built from
    the keys' text (keys_lock): quotes, backslashes and non-ASCII keys are matched byte for
    byte and granted, each with its token."""
    eng = Engine(database, tenant)
    keys = ["o'k", "back\\slash", "\\'", "ü", "u\u0308", "' OR 1=1 -- "]
    items = [
        submit_item(eng.ids[eng.queue], key, idempotency_key=secrets.token_hex(8)) for key in keys
    ]
    database.call("task_submit_many", tenant.namespace_id, "t", json.dumps(items))
    session, _ = eng.hello(capacity=10)
    granted = eng.claim(session, 10)
    assert sorted(a["concurrency_key"] for a in granted) == sorted(keys)
    assert all(int(a["concurrency_token"]) > 0 for a in granted)
