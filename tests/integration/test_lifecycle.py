"""An attempt's life after its claim: hello and resume, start, renew, results and retries,
deadlines, lease recovery, the K6 release rules row by row, attempts that never start (L3).
Real procedures on a real MariaDB."""

from __future__ import annotations

import json
import threading
import time

import pytest

from orbit_shell import errors
from orbit_shell.engine.db import Database
from tests.engine import queue_counts, sweep

U64_MAX = 18446744073709551615


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
    sweep(database)
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
        # The wait counts from the instant the attempt finished: the named wait, to its
        # rounding, is the gap between the two stamps.
        assert abs(float(row["details"].removeprefix("retry after ").rstrip("s")) - wait) < 0.0006


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
    from orbit_shell.engine import db

    task = eng.submit("deadline/k", deadline=60)
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            "WHERE public_id = %s",
            (task,),
        )
    conn.close()
    sweep(database)
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
    assert queue_counts(database, eng.ids[eng.queue]) == {
        "unfinished_tasks": 1,
        "active_attempts": 0,
    }


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
    from orbit_shell.engine import db

    eng.submit("kill/k")  # the key row exists
    before = queue_counts(database, eng.ids[eng.queue])
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
        "wait",
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
            # An uncommitted record of the same Idempotency-Key: the submit reads past it (READ
            # COMMITTED), writes its task and then waits at its own record's insert.
            cur.execute(
                "INSERT INTO idempotency_records (namespace_id, idempotency_key, fingerprint, "
                "task_id, created_at) VALUES (%s, 'killed-idem', %s, 0, UTC_TIMESTAMP(6))",
                (eng.t.namespace_id, "0" * 64),
            )
        thread.start()
        # Wait until the submit has written its task row and waits for the record's lock.
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
    assert queue_counts(database, eng.ids[eng.queue]) == before
    # The producer retries with the same Idempotency-Key: exactly one task.
    shell.call("task_submit", *args)
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE idempotency_key = 'killed-idem'"
    ) == [{"n": 1}]


# Quotas at claim (K5) ------------------------------------------------------------------------


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
        sweep(eng.db)
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
        sweep(eng.db)
    assert eng.task(task)["state"] == "WAITING"
    [c] = eng.claim(session, 1)
    assert c["attempt_number"] == 4
