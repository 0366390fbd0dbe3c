"""Dispatch engine: claim and grant, tokens (K7), parked keys (K8), fairness and capacity.
Real procedures on a real MariaDB; concurrency tests use real threads and connections."""

from __future__ import annotations

import json
import random
import secrets
import threading
import time

import pytest

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.engine.schema import routine_name
from tests.engine import Engine, call_reads, submit_item

U64_MAX = 18446744073709551615


def test_seed_scenario_one_permit_across_two_queues_and_a_growing_token(eng):
    q1, _ = eng.queue_create()
    q2, _ = eng.queue_create()
    t1, t2 = eng.submit("object/42", q1), eng.submit("object/42", q2)
    session, _ = eng.hello([q1, q2], capacity=4)
    [a] = eng.claim(session, 4)
    assert eng.claim(session, 4) == []  # the other queue's task waits for the key
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"])
    [b] = eng.claim(session, 4)
    assert {a["task_id"], b["task_id"]} == {t1, t2}
    assert b["concurrency_token"] > a["concurrency_token"] > 0
    r = eng.resource("object/42")
    assert r["version"] == 3 and r["token"] == b["concurrency_token"]  # claim, release, claim


def test_one_batch_never_grants_a_key_twice(eng):
    for _ in range(5):
        eng.submit("batch/k")
    eng.submit("batch/other")
    session, _ = eng.hello(capacity=10)
    granted = eng.claim(session, 10)
    assert sorted(a["concurrency_key"] for a in granted) == ["batch/k", "batch/other"]


def _call_reads(dsn: str, procedure: str, *args) -> tuple[int, list]:
    """Rows the call read (on a connection of its own) and its first result set."""
    from orbit_shell.engine import db

    conn = db.connect(dsn)
    try:
        return call_reads(conn, procedure, *args)
    finally:
        conn.close()


def _claim_reads(dsn: str, namespace: int, session: str) -> tuple[int, list]:
    return _call_reads(dsn, "worker_claim", namespace, session, 10, 0)


@pytest.mark.slow
def test_k8_ten_thousand_blocked_tasks_do_not_hide_another_key(eng, database):
    # An hour's lease: the holder must still hold the key however slowly the 10,000 go in (a
    # running server's sweeper would rightly recover a 30 s lease on a loaded machine).
    queue, _ = eng.queue_create(lease=3600)
    holder_session, _ = eng.hello([queue], capacity=1)
    eng.submit("hot/key", queue)
    [held] = eng.claim(holder_session, 1)
    session, _ = eng.hello([queue], capacity=10)

    eng.submit("cold/key-0", queue)
    reads_small, rows = _claim_reads(database.dsn, eng.t.namespace_id, session)
    assert [r["concurrency_key"] for r in rows] == ["cold/key-0"]

    # 10,000 tasks parked behind the busy key, submitted through the procedure like any other.
    from orbit_shell.engine import db

    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            for i in range(10_000):
                cur.execute(
                    f"CALL {routine_name('task_submit')}(%s, %s, %s, REPEAT('f', 64), "
                    "'h', 'v1', 'v1', '{}', "
                    "'', 'hot/key', 5, NULL, NULL, 'wait', NULL, NULL, 'test', NULL, NULL, NULL)",
                    (eng.t.namespace_id, eng.ids[queue], f"bulk-{i}"),
                )
                cur.fetchall()
                while cur.nextset():
                    pass
    finally:
        conn.close()
    lanes = database.query(
        "SELECT lane, COUNT(*) AS n FROM tasks WHERE namespace_id = %s "
        "AND concurrency_key = 'hot/key' GROUP BY lane",
        (eng.t.namespace_id,),
    )
    assert {r["lane"]: r["n"] for r in lanes} == {None: 1, "BLOCKED": 10_000}

    eng.submit("cold/key-1", queue)
    reads_big, rows = _claim_reads(database.dsn, eng.t.namespace_id, session)
    assert [r["concurrency_key"] for r in rows] == ["cold/key-1"]  # claimed at once
    # Rows the claim reads do not grow with the backlog behind the busy key.
    assert reads_big < reads_small + 50, (reads_small, reads_big)
    eng.start(holder_session, held["attempt_id"])


def test_w2_an_unkeyed_session_reads_past_no_ready_keyed_task(eng, database):
    """A session without concurrency_keys takes unkeyed tasks only. Its claim and its probe read
    the unkeyed rows' own index range (migration 000007): through ix_tasks_claim they read every
    READY keyed task ahead of them, 50k rows a claim with 50k free keys waiting."""
    queue, _ = eng.queue_create()
    ns, dsn = eng.t.namespace_id, database.dsn
    plain, _ = eng.hello([queue], capacity=10, keys=False)
    probe_small, [ready] = _call_reads(dsn, "session_ready", ns, plain)
    assert ready["ready"] == 0
    eng.submit("", queue)
    claim_small, rows = _claim_reads(dsn, ns, plain)
    assert [r["concurrency_key"] for r in rows] == [""]

    for batch in range(4):  # 400 READY keyed tasks, each the candidate of its own free key
        items = [submit_item(eng.ids[queue], f"ready/{batch}-{i}") for i in range(100)]
        database.call("task_submit_many", ns, "test", json.dumps(items))
    probe_big, [ready] = _call_reads(dsn, "session_ready", ns, plain)
    assert ready["ready"] == 0  # nothing it may take
    unkeyed = eng.submit("", queue, priority=9)  # behind every keyed task in claim order
    claim_big, rows = _claim_reads(dsn, ns, plain)
    assert [r["task_id"] for r in rows] == [unkeyed]
    assert claim_big < claim_small + 50, (claim_small, claim_big)
    assert probe_big < probe_small + 50, (probe_small, probe_big)


def test_k4_a_key_named_across_a_batch_parks_as_one_submission_after_another_would(eng, database):
    """task_submit_many's set-based path takes items that name one key several times: in item
    order, the first in an ACTIVE queue may become the key's candidate, the rest park."""
    paused, paused_public = eng.queue_create()
    active, _ = eng.queue_create()
    ns = eng.t.namespace_id
    database.call("queue_set_state", ns, paused_public, "PAUSED")
    order = [paused, active, active, paused]

    def lanes(key: str) -> list[str]:
        rows = database.query(
            "SELECT lane FROM tasks WHERE namespace_id = %s AND concurrency_key = %s ORDER BY id",
            (ns, key),
        )
        return [r["lane"] for r in rows]

    for queue in order:  # one submission after another
        eng.submit("across/single", queue)
    items = [submit_item(eng.ids[queue], "across/batch") for queue in order]
    [answers] = database.call("task_submit_many", ns, "test", json.dumps(items))
    assert [a["item_error"] for a in answers] == [None] * 4
    assert (
        lanes("across/batch")
        == lanes("across/single")
        == [
            "BLOCKED",
            "READY",
            "BLOCKED",
            "BLOCKED",
        ]
    )
    [second] = database.query("SELECT id FROM tasks WHERE public_id = %s", (answers[1]["task_id"],))
    assert eng.resource("across/batch")["candidate_task_id"] == second["id"]


def test_pausing_a_queue_parks_its_ready_keyed_tasks_without_reading_its_unkeyed_backlog(
    eng, database
):
    queue, public = eng.queue_create()
    ns = eng.t.namespace_id
    items = [submit_item(eng.ids[queue]) for _ in range(400)]
    items += [submit_item(eng.ids[queue], f"pause/{i}") for i in range(5)]
    database.call("task_submit_many", ns, "test", json.dumps(items))
    reads, _ = _call_reads(database.dsn, "queue_set_state", ns, public, "PAUSED")
    lanes = database.query(
        "SELECT concurrency_key <> '' AS keyed, lane, COUNT(*) AS n FROM tasks "
        "WHERE queue_id = %s GROUP BY keyed, lane",
        (eng.ids[queue],),
    )
    assert {(r["keyed"], r["lane"]): r["n"] for r in lanes} == {
        (0, "READY"): 400,
        (1, "BLOCKED"): 5,
    }
    # Each keyed task is found as the first row of its range: 54 rows read here. The old loop
    # walked the queue's READY rows in id order, unkeyed ones included (448).
    assert reads < 200, reads


@pytest.mark.slow
def test_eight_threads_overlapping_keys_never_share_a_key_and_tokens_grow(eng, database):
    keys = [f"stress/{i}" for i in range(4)]
    threads, cycles = 8, 250
    for _ in range(threads * cycles):
        eng.submit(random.choice(keys))
    events = []  # (key, token, got_at, release_at, attempt)
    lock = threading.Lock()
    failures = []

    def worker(n: int) -> None:
        db = Database(database.dsn, pool_size=2)
        session, _ = eng.hello(capacity=2, worker=f"stress-{n}-{eng.t.namespace_id}")
        idle = 0
        while idle < 20:
            try:
                granted = Engine.claim(eng_local(db), session, 2)
            except errors.OrbitError as exc:
                failures.append(exc)
                return
            if not granted:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            for a in granted:
                got = time.monotonic()
                Engine.start(eng_local(db), session, a["attempt_id"])
                if random.random() < 0.5:
                    time.sleep(random.uniform(0, 0.002))
                released = time.monotonic()
                Engine.result(eng_local(db), session, a["attempt_id"])
                with lock:
                    events.append(
                        (
                            a["concurrency_key"],
                            a["concurrency_token"],
                            got,
                            released,
                            a["attempt_id"],
                        )
                    )
        db.close()

    def eng_local(db):
        e = Engine.__new__(Engine)
        e.db, e.t, e.queue, e.ids = db, eng.t, eng.queue, eng.ids
        return e

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not failures
    assert len(events) == threads * cycles
    for key in keys:
        mine = sorted((e for e in events if e[0] == key), key=lambda e: e[2])
        tokens = [e[1] for e in mine]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), key
        for earlier, later in zip(mine, mine[1:], strict=False):
            assert earlier[3] <= later[2], f"{key}: {earlier[4]} and {later[4]} overlapped"
    done = database.query(
        "SELECT state, COUNT(*) AS n FROM tasks WHERE namespace_id = %s GROUP BY state",
        (eng.t.namespace_id,),
    )
    assert done == [{"state": "SUCCEEDED", "n": threads * cycles}]


def test_k7_token_refused_at_u64_max_never_wraps(eng, database, orbit_dsn, last_epoch):
    from orbit_shell.engine import db

    first = eng.submit("overflow/k")
    session, _ = eng.hello(capacity=1)
    [a] = eng.claim(session, 1)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"])
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:  # test setup: move the key near the end of its token space
        cur.execute(
            "UPDATE concurrency_resources SET token = %s WHERE namespace_id = %s "
            "AND concurrency_key = 'overflow/k'",
            (U64_MAX - 1, eng.t.namespace_id),
        )
    conn.close()
    eng.submit("overflow/k")
    [b] = eng.claim(session, 1)
    assert b["concurrency_token"] == U64_MAX
    eng.start(session, b["attempt_id"])
    eng.result(session, b["attempt_id"])
    third = eng.submit("overflow/k")
    assert eng.claim(session, 1) == []
    assert eng.claim(session, 1) == []
    assert eng.task(third)["state"] == "WAITING"
    assert eng.resource("overflow/k")["token"] == U64_MAX
    history = database.query(
        "SELECT event FROM task_history WHERE task_id = %s", (eng.task(third)["id"],)
    )
    assert [h["event"] for h in history].count("TOKEN_SPACE_EXHAUSTED") == 1
    assert eng.task(first)["state"] == "SUCCEEDED"
    eng.submit("overflow/other")
    assert [r["concurrency_key"] for r in eng.claim(session, 1)] == ["overflow/other"]


# The set-based grant (worker_claim's fast path) must refuse or grant exactly as attempt_grant
# does; each case below is a claim of several, where a claim of one would take the loop.


def test_k7_a_batch_claim_gives_each_key_a_larger_token(eng):
    session, _ = eng.hello(capacity=4)
    for key in ("batch/k1", "batch/k2"):
        eng.submit(key)
    for a in eng.claim(session, 4):
        eng.start(session, a["attempt_id"])
        eng.result(session, a["attempt_id"])
    before = {k: eng.resource(k)["token"] for k in ("batch/k1", "batch/k2")}
    for key in before:
        eng.submit(key)
    granted = eng.claim(session, 4)
    assert sorted(a["concurrency_key"] for a in granted) == sorted(before)
    for a in granted:
        assert a["concurrency_token"] > before[a["concurrency_key"]]
        assert eng.resource(a["concurrency_key"])["token"] == a["concurrency_token"]


def test_k7_a_batch_claim_refuses_a_key_at_the_end_of_its_token_space(eng, database, last_epoch):
    session, _ = eng.hello(capacity=4)
    eng.submit("batch/full")
    [a] = eng.claim(session, 4)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"])
    eng.force(  # the key's last token is spent
        "UPDATE concurrency_resources SET token = %s "
        "WHERE namespace_id = %s AND concurrency_key = %s",
        U64_MAX,
        eng.t.namespace_id,
        "batch/full",
    )
    full, free = eng.submit("batch/full"), eng.submit("batch/free")
    assert [a["task_id"] for a in eng.claim(session, 4)] == [free]
    assert eng.task(full)["state"] == "WAITING"
    assert eng.resource("batch/full")["token"] == U64_MAX
    history = database.query(
        "SELECT event FROM task_history WHERE task_id = %s", (eng.task(full)["id"],)
    )
    assert [h["event"] for h in history].count("TOKEN_SPACE_EXHAUSTED") == 1


def test_a_batch_claim_ends_a_task_past_its_deadline_and_grants_the_rest(eng):
    session, _ = eng.hello(capacity=4)
    late, fresh = eng.submit(deadline=60), eng.submit()
    eng.force(
        "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE public_id = %s",
        late,
    )
    assert [a["task_id"] for a in eng.claim(session, 4)] == [fresh]
    assert eng.task(late)["state"] == "DEADLINE_EXCEEDED"


def test_a_batch_claim_ends_each_lease_at_its_tasks_deadline_when_that_comes_first(eng):
    session, _ = eng.hello(capacity=4)
    soon, open_ended = eng.submit(deadline=5), eng.submit()
    granted = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 4)}
    assert set(granted) == {soon, open_ended}
    leases = {
        task: eng.db.query(
            "SELECT lease_expires_at FROM attempts WHERE public_id = %s", (attempt,)
        )[0]["lease_expires_at"]
        for task, attempt in granted.items()
    }
    assert leases[soon] == eng.task(soon)["deadline_at"]  # 5 s, not the queue's 30 s lease
    assert leases[open_ended] > eng.task(soon)["deadline_at"]


def test_a_batch_claim_never_grants_a_key_its_row_says_is_held(eng):
    """A READY keyed task always has a free key (K5); the claim checks the key row anyway,
    under its lock, and grants nothing that row says is held."""
    session, _ = eng.hello(capacity=4)
    held, free = eng.submit("batch/held"), eng.submit()
    eng.force(  # a key row that contradicts its READY candidate
        "UPDATE concurrency_resources SET holder_attempt_id = 1 "
        "WHERE namespace_id = %s AND concurrency_key = %s",
        eng.t.namespace_id,
        "batch/held",
    )
    assert [a["task_id"] for a in eng.claim(session, 4)] == [free]
    assert eng.task(held)["state"] == "WAITING"


def test_claim_respects_capacity_priority_and_unkeyed_sessions(eng):
    low = eng.submit("", priority=9)
    high = eng.submit("", priority=0)
    keyed = eng.submit("only/keyed", priority=0)
    legacy, _ = eng.hello(capacity=1, keys=False)
    [a] = eng.claim(legacy, 5)
    assert a["task_id"] == high  # priority first, keyed task never offered
    assert eng.claim(legacy, 5) == []  # capacity 1 is used
    eng.start(legacy, a["attempt_id"])
    eng.result(legacy, a["attempt_id"])
    [b] = eng.claim(legacy, 5)
    assert b["task_id"] == low
    modern, _ = eng.hello(capacity=3)
    assert [r["task_id"] for r in eng.claim(modern, 5)] == [keyed]


def test_fairness_a_burst_is_split_between_idle_sessions(eng):
    for _ in range(8):
        eng.submit()
    s1, _ = eng.hello(capacity=8)
    s2, _ = eng.hello(capacity=8)
    first = eng.claim(s1, 8)
    second = eng.claim(s2, 8)
    assert len(first) == 4 and len(second) == 4


def test_fairness_counts_only_idle_open_sessions_seen_lately_on_a_shared_queue(eng, database):
    queue, _ = eng.queue_create()
    other_queue, _ = eng.queue_create()
    for _ in range(8):
        eng.submit("", queue)
    eng.hello([other_queue], capacity=8)  # idle and seen now, but shares no queue
    closed, _ = eng.hello([queue], capacity=8)
    database.call("worker_goodbye", eng.t.namespace_id, closed)
    quiet, _ = eng.hello([queue], capacity=8)
    eng.unseen(quiet)  # open, but not seen for a minute
    mine, _ = eng.hello([queue], capacity=16)
    assert len(eng.claim(mine, 8)) == 8  # none of them is an idle node to share the burst with
    for _ in range(8):
        eng.submit("", queue)
    eng.hello([queue], capacity=8)  # one that is
    assert len(eng.claim(mine, 8)) == 4


def test_a_claim_reads_no_row_of_sessions_gone_from_its_queues(eng, database):
    """Every worker process registers a session of its own, so a queue's sessions grow with
    its history. The claim's fair share looks at the sessions seen in the last 5 seconds
    (migration 000008); it read two rows of every session ever registered on its queues."""
    queue, _ = eng.queue_create()
    ns = eng.t.namespace_id
    session, _ = eng.hello([queue], capacity=1)

    def claim_reads() -> int:
        eng.submit("", queue)
        reads, [granted] = _claim_reads(database.dsn, ns, session)
        eng.start(session, granted["attempt_id"])
        eng.result(session, granted["attempt_id"])
        return reads

    few = claim_reads()
    gone = [eng.hello([queue], worker=f"gone-{i}-{secrets.token_hex(3)}")[0] for i in range(300)]
    for public_id in gone:
        database.call("worker_goodbye", ns, public_id)
    eng.unseen(*gone)
    many = claim_reads()
    assert many < few + 50, (few, many)
