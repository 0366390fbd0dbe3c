"""Dispatch engine: claim, tokens, start/renew/result, recovery, K6 row by row.
Real procedures on a real MariaDB; concurrency tests use real threads and connections."""

from __future__ import annotations

import json
import random
import secrets
import threading
import time

import pytest

from orbit_shell import errors
from orbit_shell.db import Database
from tests.engine import Engine, call_reads, submit_item

U64_MAX = 18446744073709551615


@pytest.fixture
def eng(database, tenant) -> Engine:
    return Engine(database, tenant)


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
    from orbit_shell import db

    conn = db.connect(dsn)
    try:
        return call_reads(conn, procedure, *args)
    finally:
        conn.close()


def _claim_reads(dsn: str, namespace: int, session: str) -> tuple[int, list]:
    return _call_reads(dsn, "worker_claim", namespace, session, 10)


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
    from orbit_shell import db

    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            for i in range(10_000):
                cur.execute(
                    "CALL task_submit(%s, %s, %s, REPEAT('f', 64), 'h', 'v1', 'v1', '{}', "
                    "'', 'hot/key', 5, NULL, NULL, 'test', NULL, NULL, NULL)",
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


def test_stale_start_and_result_after_recovery_are_lease_lost(eng):
    task = eng.submit("stale/k")
    old, _ = eng.hello(capacity=1)
    [a] = eng.claim(old, 1)
    eng.expire(a["attempt_id"])  # the holder stalled before start
    new, _ = eng.hello(capacity=1)
    [b] = eng.claim(new, 1)  # recovery runs inside the claim
    assert b["task_id"] == task and b["concurrency_token"] > a["concurrency_token"]
    with pytest.raises(errors.LeaseLost):
        eng.start(old, a["attempt_id"])
    with pytest.raises(errors.LeaseLost):
        eng.result(old, a["attempt_id"])
    with pytest.raises(errors.LeaseLost):
        eng.renew(old, a["attempt_id"])
    eng.start(new, b["attempt_id"])
    eng.result(new, b["attempt_id"])
    assert eng.task(task)["state"] == "SUCCEEDED"
    with pytest.raises(errors.LeaseLost):  # however late it arrives
        eng.result(old, a["attempt_id"], "failed")


def test_a_claim_that_recovers_its_own_expired_lease_uses_the_room_at_once(eng):
    session, _ = eng.hello(capacity=1)
    task = eng.submit("own/k")
    [a] = eng.claim(session, 1)
    eng.expire(a["attempt_id"])  # stalled before start; the session is full until recovery
    [b] = eng.claim(session, 1)  # recovers it, then has room for it again
    assert b["task_id"] == task and b["attempt_number"] == 2


def test_a_claim_recovers_a_running_holder_past_its_lease_and_takes_its_key(eng):
    """Recovery runs inside claims (SPEC 3), for RUNNING attempts too: the claim's guard
    looks for the earliest lease of each state, and a guard blind to one state left such
    a key held until the sweeper came by."""
    first = eng.submit("claimrec/k")
    second = eng.submit("claimrec/k")  # parked behind the first
    old, _ = eng.hello(capacity=1)
    [a] = eng.claim(old, 1)
    eng.start(old, a["attempt_id"])
    eng.expire(a["attempt_id"])  # the holder stalled while running
    new, _ = eng.hello(capacity=1)
    [b] = eng.claim(new, 1)  # recovers it (UNKNOWN, key released), then takes the next
    assert b["task_id"] == second and b["concurrency_token"] > a["concurrency_token"]
    assert eng.task(first)["state"] == "NEEDS_REVIEW"


def test_running_holder_past_its_lease_goes_to_review_and_its_late_result_is_refused(eng, database):
    task = eng.submit("review/k")
    old, _ = eng.hello(capacity=1)
    [a] = eng.claim(old, 1)
    eng.start(old, a["attempt_id"])
    eng.expire(a["attempt_id"])
    # Recovered by this sweep, or by a running server's sweeper: either way, exactly once.
    database.call("lease_sweep", 100)
    assert eng.task(task)["state"] == "NEEDS_REVIEW"
    assert eng.resource("review/k")["holder_attempt_id"] is None
    with pytest.raises(errors.LeaseLost):
        eng.result(old, a["attempt_id"])
    database.call("task_resolve", eng.t.namespace_id, task, "WAITING", "test", None)
    new, _ = eng.hello(capacity=1)
    [b] = eng.claim(new, 1)
    assert b["concurrency_token"] == a["concurrency_token"] + 1
    eng.start(new, b["attempt_id"])
    eng.result(new, b["attempt_id"])
    states = database.query(
        "SELECT state FROM attempts WHERE task_id = %s ORDER BY id", (eng.task(task)["id"],)
    )
    assert [s["state"] for s in states] == ["UNKNOWN", "SUCCEEDED"]


def test_k7_token_refused_at_u64_max_never_wraps(eng, database, orbit_dsn):
    from orbit_shell import db

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


def test_k7_a_batch_claim_refuses_a_key_at_the_end_of_its_token_space(eng, database):
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


def test_hello_flag_is_fixed_and_hello_again_resumes_in_flight(eng):
    eng.submit("resume/k")
    worker = "resume-" + str(eng.t.namespace_id)
    session, in_flight = eng.hello(worker=worker)
    assert in_flight == []
    [a] = eng.claim(session, 1)
    with pytest.raises(errors.StateConflict):
        eng.hello(worker=worker, keys=False)
    again, in_flight = eng.hello(worker=worker)
    assert again == session
    assert [(r["attempt_id"], r["concurrency_token"]) for r in in_flight] == [
        (a["attempt_id"], a["concurrency_token"])
    ]


def test_renew_extends_lease_and_permits_but_never_past_the_deadline(eng, database):
    eng.submit("renew/k", deadline=5)
    session, _ = eng.hello(capacity=1)
    [a] = eng.claim(session, 1)
    permits = database.query(
        "SELECT kind, expires_at FROM permits p JOIN attempts a ON "
        "a.id = p.attempt_id WHERE a.public_id = %s",
        (a["attempt_id"],),
    )
    assert sorted(p["kind"] for p in permits) == ["KEY", "QUEUE"]
    task = eng.task(a["task_id"])
    assert a["lease_expires_at"] == task["deadline_at"]  # 30 s lease capped by the 5 s deadline
    renewed = eng.renew(session, a["attempt_id"])["lease_expires_at"]
    assert renewed == task["deadline_at"]


def test_retry_backoff_releases_the_key_and_the_task_returns_without_another_release(eng, database):
    queue, _ = eng.queue_create(backoff=1)
    retried = eng.submit("retry/k", queue)
    session, _ = eng.hello([queue], capacity=2)
    [a] = eng.claim(session, 2)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"], "failed", retryable=1)
    row = eng.task(retried)
    assert (row["state"], row["lane"]) == ("WAITING", "DELAYED")
    assert eng.resource("retry/k")["holder_attempt_id"] is None  # not held while backing off
    other = eng.submit("retry/k", queue)
    [b] = eng.claim(session, 2)
    assert b["task_id"] == other  # the key serves another task during the backoff
    eng.start(session, b["attempt_id"])
    eng.result(session, b["attempt_id"])
    deadline = time.monotonic() + 5
    granted = []
    while not granted and time.monotonic() < deadline:
        time.sleep(0.1)
        granted = eng.claim(session, 2)
    assert [g["task_id"] for g in granted] == [retried]
    assert granted[0]["attempt_number"] == 2
    assert granted[0]["concurrency_token"] == 3


@pytest.mark.parametrize(("base", "cap"), [(2, 5), (10, 3)], ids=["capped-later", "cap-below-base"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_retry_backoff_is_exponential_with_jitter_on_both_paths(eng, database, batch, base, cap):
    """Base 2 s, cap 5 s: the n-th retry waits min(5, 2 * 2**(n-1)) s times [0.5, 1.0], and its
    history names the wait. attempt_result_many draws it set-based, attempt_result per item.
    A cap below the base caps the first retry too."""
    queue, _ = eng.queue_create(backoff=base, backoff_max=cap)
    task = eng.submit("", queue, max_attempts=9)
    session, _ = eng.hello([queue], capacity=1)
    for n in range(1, 5):
        eng.due(task)
        [a] = eng.claim(session, 1)
        eng.start(session, a["attempt_id"])
        if batch:
            item = {"attempt_id": a["attempt_id"], "outcome": "failed", "retryable": 1}
            item.update(result="", error="")
            [[answer]] = database.call(
                "attempt_result_many", eng.t.namespace_id, session, json.dumps([item])
            )
            assert answer["item_error"] is None
        else:
            eng.result(session, a["attempt_id"], "failed", retryable=1)
        [row] = database.query(
            "SELECT t.state, t.lane, TIMESTAMPDIFF(MICROSECOND, a.finished_at, t.available_at) "
            "AS wait_us, h.details FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "JOIN task_history h ON h.attempt_id = a.id AND h.event = 'RETRY_SCHEDULED' "
            "WHERE a.public_id = %s",
            (a["attempt_id"],),
        )
        wait, capped = row["wait_us"] / 1e6, min(cap, base * 2 ** (n - 1))
        assert (row["state"], row["lane"]) == ("WAITING", "DELAYED")
        assert 0.5 * capped <= wait <= capped, (n, wait)
        assert abs(float(row["details"].removeprefix("retry after ").rstrip("s")) - wait) < 0.002


def test_failed_final_and_attempts_exhausted(eng):
    task = eng.submit("", max_attempts=1)
    session, _ = eng.hello()
    [a] = eng.claim(session)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"], "failed", retryable=1)
    assert eng.task(task)["state"] == "FAILED"


def test_result_before_start_is_a_state_conflict(eng):
    eng.submit()
    session, _ = eng.hello()
    [a] = eng.claim(session)
    with pytest.raises(errors.StateConflict):
        eng.result(session, a["attempt_id"])


def test_waiting_task_past_deadline_ends_deadline_exceeded(eng, database, orbit_dsn):
    from orbit_shell import db

    task = eng.submit("deadline/k", deadline=60)
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE public_id = %s",
            (task,),
        )
    conn.close()
    database.call("lease_sweep", 100)
    assert eng.task(task)["state"] == "DEADLINE_EXCEEDED"
    follower = eng.submit("deadline/k")
    session, _ = eng.hello()
    assert [r["task_id"] for r in eng.claim(session)] == [follower]


# K6, row by row ------------------------------------------------------------------------------


def test_k6_renewal_and_reconnect_keep_the_same_attempt_and_token(eng):
    eng.submit("k6/renew")
    worker = "k6r-" + str(eng.t.namespace_id)
    session, _ = eng.hello(worker=worker)
    [a] = eng.claim(session)
    eng.start(session, a["attempt_id"])
    eng.renew(session, a["attempt_id"])
    _, in_flight = eng.hello(worker=worker)
    assert in_flight[0]["concurrency_token"] == a["concurrency_token"]
    assert eng.resource("k6/renew")["token"] == a["concurrency_token"]


def test_k6_duplicate_result_does_not_release_the_next_holder(eng):
    eng.submit("k6/dup")
    eng.submit("k6/dup")
    session, _ = eng.hello()
    [a] = eng.claim(session)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"])
    [b] = eng.claim(session)
    assert eng.result(session, a["attempt_id"])["duplicate"] == 1  # replay of the old receipt
    r = eng.resource("k6/dup")
    assert r["token"] == b["concurrency_token"]
    assert r["holder_attempt_id"] is not None  # b still holds the key
    with pytest.raises(errors.LeaseLost):  # a different result for the old attempt
        eng.result(session, a["attempt_id"], "failed")


def test_k6_unknown_releases_but_still_counts_toward_the_backlog(eng, database):
    eng.submit("k6/unknown")
    session, _ = eng.hello()
    [a] = eng.claim(session)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"], "unknown")
    assert eng.resource("k6/unknown")["holder_attempt_id"] is None
    [q] = database.query(
        "SELECT unfinished_tasks, active_attempts FROM queues WHERE id = %s", (eng.ids[eng.queue],)
    )
    assert q == {"unfinished_tasks": 1, "active_attempts": 0}


def test_k6_pause_and_goodbye_release_nothing(eng, database):
    _, queue_public = eng.queue_create()
    queue = queue_public
    eng.submit("k6/pause", queue)
    session, _ = eng.hello([queue])
    [a] = eng.claim(session)
    eng.start(session, a["attempt_id"])
    database.call("queue_set_state", eng.t.namespace_id, queue_public, "PAUSED")
    database.call("worker_goodbye", eng.t.namespace_id, session)
    r = eng.resource("k6/pause")
    assert r["holder_attempt_id"] is not None  # still held: ends by lease or result
    eng.renew(session, a["attempt_id"])
    eng.result(session, a["attempt_id"])  # a draining worker's result is accepted
    assert eng.resource("k6/pause")["holder_attempt_id"] is None
    with pytest.raises(errors.StateConflict):
        eng.claim(session)  # a closed session claims nothing until hello again


def test_pausing_a_queue_hands_key_candidacy_to_another_queue(eng, database):
    q1, q1_public = eng.queue_create()
    q2, _ = eng.queue_create()
    eng.submit("pause/k", q1)
    other = eng.submit("pause/k", q2)
    database.call("queue_set_state", eng.t.namespace_id, q1_public, "PAUSED")
    session, _ = eng.hello([q1, q2])
    assert [r["task_id"] for r in eng.claim(session)] == [other]
    database.call("queue_set_state", eng.t.namespace_id, q1_public, "ACTIVE")


# Faults --------------------------------------------------------------------------------------


def test_killed_connection_mid_procedure_leaves_nothing_half_written(eng, database, orbit_dsn):
    from orbit_shell import db

    eng.submit("kill/k")  # the key row exists
    before = database.query(
        "SELECT unfinished_tasks FROM applications WHERE id = %s", (eng.t.application_id,)
    )
    shell = Database(orbit_dsn)
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT CONNECTION_ID() AS id")
        victim = cur.fetchone()["id"]
    shell._idle.put_nowait(conn)  # the shell's next call runs on this connection
    args = (
        eng.t.namespace_id,
        eng.ids[eng.queue],
        "killed-idem",
        "f" * 64,
        "h",
        "v1",
        "v1",
        "{}",
        "",
        "kill/k",
        5,
        None,
        None,
        "test",
        None,
        None,
        None,
    )
    out = {}

    def submit():
        try:
            shell.call("task_submit", *args)
        except errors.OrbitError as exc:
            out["error"] = exc

    blocker = db.connect(orbit_dsn, autocommit=False)
    thread = threading.Thread(target=submit)
    try:
        with blocker.cursor() as cur:
            cur.execute(
                "SELECT id FROM concurrency_resources WHERE namespace_id = %s AND "
                "concurrency_key = 'kill/k' FOR UPDATE",
                (eng.t.namespace_id,),
            )
        thread.start()
        # Wait until the submit has written its task row and waits for the key row's lock.
        for _ in range(100):
            time.sleep(0.05)
            rows = database.query(
                "SELECT state FROM information_schema.processlist WHERE id = %s", (victim,)
            )
            if rows and "lock" in (rows[0]["state"] or "").lower():
                break
        mid = database.query(
            "SELECT COUNT(*) AS n FROM information_schema.innodb_trx "
            "WHERE trx_mysql_thread_id = %s AND trx_rows_modified > 0",
            (victim,),
        )
        assert mid == [{"n": 1}], "the submit was not caught mid-transaction"
        with blocker.cursor() as cur:
            cur.execute(f"KILL CONNECTION {int(victim)}")
        thread.join(10)
    finally:
        blocker.rollback()
        blocker.close()
        thread.join(10)
    assert isinstance(out.get("error"), errors.Unavailable)
    assert database.query(
        "SELECT COUNT(*) AS n FROM idempotency_records WHERE idempotency_key = 'killed-idem'"
    ) == [{"n": 0}]
    assert (
        database.query(
            "SELECT unfinished_tasks FROM applications WHERE id = %s", (eng.t.application_id,)
        )
        == before
    )
    # The producer retries with the same Idempotency-Key: exactly one task.
    shell.call("task_submit", *args)
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE idempotency_key = 'killed-idem'"
    ) == [{"n": 1}]


# Quotas at claim (K5) ------------------------------------------------------------------------


def _quota(orbit_dsn, monkeypatch, application: str, active: int) -> None:
    """The application quota (K5), set the way an operator sets it."""
    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)
    args = ["set-quota", "--application", application, "--max-active-attempts", str(active)]
    assert admin(args) == 0


def test_k5_application_quota_counts_each_attempt_once(eng, database, orbit_dsn, monkeypatch):
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    eng.submit("quota/a")  # keyed: two permit records, counted once by the application
    eng.submit("quota/b")
    eng.submit()
    session, _ = eng.hello(capacity=10)
    granted = eng.claim(session, 10)
    assert len(granted) == 2
    [app] = database.query(
        "SELECT active_attempts FROM applications WHERE id = %s", (eng.t.application_id,)
    )
    assert app["active_attempts"] == 2
    assert eng.claim(session, 10) == []
    eng.start(session, granted[0]["attempt_id"])
    eng.result(session, granted[0]["attempt_id"])
    assert len(eng.claim(session, 10)) == 1


def test_k5_a_claim_cut_short_by_the_quota_grants_its_best_candidates(eng, orbit_dsn, monkeypatch):
    """Fewer grants than candidates (W2 priority): the set-based grant keeps the best ones."""
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    low, high, middle = (eng.submit("", priority=p) for p in (9, 0, 5))
    session, _ = eng.hello(capacity=10)
    assert [a["task_id"] for a in eng.claim(session, 10)] == [high, middle]  # not low


def test_k5_a_claim_that_recovers_a_lease_under_the_quota_grants_in_its_room(
    eng, orbit_dsn, monkeypatch
):
    """A recovery inside the claim frees an application permit: the same claim may use it."""
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    for _ in range(3):
        eng.submit()
    session, _ = eng.hello(capacity=10)
    first, _second = eng.claim(session, 10)
    eng.expire(first["attempt_id"])  # stalled before start: recovered by the next claim
    assert len(eng.claim(session, 10)) == 1


def test_k5_queue_permits_limit_concurrent_attempts(eng):
    queue, _ = eng.queue_create(max_concurrency=1)
    for _ in range(3):
        eng.submit("", queue)
    s1, _ = eng.hello([queue], capacity=5)
    s2, _ = eng.hello([queue], capacity=5)
    [a] = eng.claim(s1, 5)
    assert eng.claim(s2, 5) == []
    eng.start(s1, a["attempt_id"])
    eng.result(s1, a["attempt_id"])
    assert len(eng.claim(s2, 5)) == 1


def test_set_quota_for_an_unknown_application_fails_clearly(orbit_dsn, capsys, monkeypatch):
    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)
    assert admin(["set-quota", "--application", "no-such-app"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err


def test_l3_a_task_never_started_fails_after_max_attempts_dispatches_and_frees_its_key(eng):
    """L3: a task whose every attempt expires before start (its answer never reached a
    worker, or each worker died holding it) is dispatched max_attempts times (the queue's
    3), then ends FAILED with the reason in its error and history; its key goes to the next
    task with a larger token, as after any final result (K6, K7)."""
    session, _ = eng.hello(capacity=1)
    task = eng.submit("never/k")
    tokens = []
    for number in (1, 2, 3):
        [a] = eng.claim(session, 1)
        assert (a["task_id"], a["attempt_number"]) == (task, number)
        tokens.append(int(a["concurrency_token"]))
        eng.expire(a["attempt_id"])
        eng.db.call("lease_sweep", 100)
    row = eng.task(task)
    assert row["state"] == "FAILED" and row["attempts_used"] == 3
    assert json.loads(row["error"])["code"] == "NEVER_STARTED"
    [last] = eng.db.query(
        "SELECT event, to_state FROM task_history WHERE task_id = %s ORDER BY id DESC LIMIT 1",
        (row["id"],),
    )
    assert last == {"event": "DISPATCH_LIMIT", "to_state": "FAILED"}
    waiting = eng.submit("never/k")
    [b] = eng.claim(session, 1)
    assert b["task_id"] == waiting and int(b["concurrency_token"]) > max(tokens)


def test_l3_started_attempts_do_not_count_toward_the_dispatch_bound(eng):
    """Only attempts that expired before start count: one that started and failed
    retryably is a retry (SPEC 3), and the task still gets its dispatches."""
    session, _ = eng.hello(capacity=1)
    task = eng.submit("")
    [a] = eng.claim(session, 1)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"], "failed", retryable=1)
    eng.due(task)
    for _ in range(2):
        [b] = eng.claim(session, 1)
        eng.expire(b["attempt_id"])
        eng.db.call("lease_sweep", 100)
    assert eng.task(task)["state"] == "WAITING"
    [c] = eng.claim(session, 1)
    assert c["attempt_number"] == 4
