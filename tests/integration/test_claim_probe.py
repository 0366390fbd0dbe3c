"""The claim's long-poll probe (session_ready): yes exactly when the claim that follows would
take or recover something, so a waiting claim can sleep on a cheap read instead of claiming
every 20-250 ms; and the claim that would find nothing, answered from the same read without a
transaction. Real procedures on a real MariaDB."""

from __future__ import annotations

import pytest

from orbit_shell import errors
from tests.engine import Engine, call_reads


def ready(eng: Engine, session: str) -> int:
    [[row]] = eng.db.call("session_ready", eng.t.namespace_id, session)
    return row["ready"]


# What a claim's transaction runs and a claim that finds nothing does not: the candidates
# table emptied and filled, the gate and the session row read under lock.
TRANSACTION_STATEMENTS = ("Com_delete", "Com_insert_select", "Com_begin")
WRITES = ("Handler_update", "Handler_write", "Handler_delete")


def claim_statements(eng: Engine, session: str, n: int) -> tuple[list[dict], dict[str, int]]:
    """A claim of ``n`` on a connection of its own: its grants, and how many of each of
    TRANSACTION_STATEMENTS it ran and of the row WRITES it made."""
    names = ", ".join(f"'{name}'" for name in TRANSACTION_STATEMENTS + WRITES)

    def counters(conn) -> dict[str, int]:
        with conn.cursor() as cur:
            cur.execute(f"SHOW SESSION STATUS WHERE Variable_name IN ({names})")
            return {r["Variable_name"]: int(r["Value"]) for r in cur.fetchall()}

    with eng.db.connection() as conn:
        before = counters(conn)
        _, rows = call_reads(conn, "worker_claim", eng.t.namespace_id, session, n, 0)
        after = counters(conn)
    return rows, {name: after[name] - before[name] for name in after}


def seen(eng: Engine, session: str) -> dict:
    [row] = eng.db.query(
        "SELECT last_seen_at, in_flight FROM worker_sessions WHERE public_id = %s", (session,)
    )
    return row


def transaction(ran: dict[str, int]) -> bool:
    return any(ran[name] for name in TRANSACTION_STATEMENTS)


def test_a_claim_that_would_find_nothing_only_marks_the_session_seen(database, tenant):
    """W2: with no READY task it may take, or no room, a claim runs no transaction; it still
    marks the session seen (the claim's fairness and the retention of unseen sessions read
    last_seen_at), and writes nothing when the session was seen in the last second. One that
    finds work, or a closed session, takes the whole path."""
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create()
    session, _ = eng.hello([queue], capacity=1, keys=False)
    eng.submit("busy/k", queue)  # keyed: not this session's to take
    eng.unseen(session)
    quiet = seen(eng, session)
    rows, ran = claim_statements(eng, session, 1)
    assert rows == [] and not transaction(ran) and ran["Handler_update"] == 1, ran
    now = seen(eng, session)
    assert now["last_seen_at"] > quiet["last_seen_at"] and now["in_flight"] == 0
    rows, ran = claim_statements(eng, session, 1)  # seen a moment ago: nothing to write
    assert rows == [] and not transaction(ran) and not any(ran[w] for w in WRITES), ran
    assert seen(eng, session) == now
    task = eng.submit("", queue)
    [granted], ran = claim_statements(eng, session, 1)
    assert granted["task_id"] == task and all(ran[name] for name in TRANSACTION_STATEMENTS), ran
    eng.submit("", queue)
    eng.unseen(session)
    quiet = seen(eng, session)
    rows, ran = claim_statements(eng, session, 1)  # full: a READY task, no room
    assert rows == [] and not transaction(ran) and ran["Handler_update"] == 1, ran
    now = seen(eng, session)
    assert now["last_seen_at"] > quiet["last_seen_at"] and now["in_flight"] == 1
    database.call("worker_goodbye", eng.t.namespace_id, session)
    with pytest.raises(errors.StateConflict):
        eng.claim(session, 1)


def test_a_claim_that_recovers_its_own_attempt_takes_the_slot_it_freed(database, tenant):
    """The room a claim reads before its recovery is not the room after it: a session whose
    only slot held an attempt past its lease gets a task in the claim that recovers it."""
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create()
    session, _ = eng.hello([queue], capacity=1)
    eng.submit("", queue)
    [a] = eng.claim(session, 1)
    eng.submit("", queue)
    eng.expire(a["attempt_id"])
    [b] = eng.claim(session, 1)
    assert b["attempt_id"] != a["attempt_id"]
    assert seen(eng, session)["in_flight"] == 1


def test_probe_says_yes_for_claimable_work_and_room_only(database, tenant):
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create()
    plain, _ = eng.hello([queue], capacity=1, keys=False)
    keyed, _ = eng.hello([queue], capacity=1, keys=True)
    assert (ready(eng, plain), ready(eng, keyed)) == (0, 0)  # nothing queued
    eng.submit("probe/k", queue)
    # A keyed task is work for a session with concurrency_keys only (W2).
    assert (ready(eng, plain), ready(eng, keyed)) == (0, 1)
    eng.submit("", queue)
    assert ready(eng, plain) == 1
    [a] = eng.claim(plain, 1)
    eng.submit("", queue)
    assert ready(eng, plain) == 0  # capacity 1, one in flight: the claim would take nothing
    eng.start(plain, a["attempt_id"])
    eng.result(plain, a["attempt_id"])
    assert ready(eng, plain) == 1
    database.call("queue_set_state", eng.t.namespace_id, queue, "PAUSED")
    assert (ready(eng, plain), ready(eng, keyed)) == (0, 0)  # a paused queue is not claimed
    database.call("queue_set_state", eng.t.namespace_id, queue, "ACTIVE")
    assert ready(eng, plain) == 1


def test_probe_says_yes_for_what_the_claim_recovers(database, tenant):
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create(backoff=300)
    session, _ = eng.hello([queue], capacity=2)
    retried = eng.submit("", queue)
    [a] = eng.claim(session, 2)
    eng.start(session, a["attempt_id"])
    eng.result(session, a["attempt_id"], "failed", retryable=1)
    assert ready(eng, session) == 0  # backing off for minutes
    eng.due(retried)
    assert ready(eng, session) == 1  # due: the claim re-enters it and takes it
    [b] = eng.claim(session, 2)
    assert b["task_id"] == retried
    full, _ = eng.hello([queue], capacity=1)
    eng.submit("", queue)
    [c] = eng.claim(full, 1)
    assert ready(eng, full) == 0  # no room, nothing to recover
    eng.expire(b["attempt_id"])
    # Room or not, an expired lease is work: the claim recovers it, as the full session's
    # claim does here (the task goes back to WAITING; the session has no room to take it).
    assert ready(eng, full) == 1
    assert eng.claim(full, 1) == []
    assert eng.task(retried)["state"] == "WAITING"
    assert ready(eng, full) == 0
    eng.start(full, c["attempt_id"])
    eng.result(full, c["attempt_id"])
    assert ready(eng, full) == 1  # room again, and the recovered task is READY
    assert [g["task_id"] for g in eng.claim(full, 1)] == [retried]


def test_probe_says_yes_for_a_running_attempt_past_its_lease(database, tenant):
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create()
    session, _ = eng.hello([queue], capacity=1)
    task = eng.submit("", queue)
    [a] = eng.claim(session, 1)
    eng.start(session, a["attempt_id"])
    assert ready(eng, session) == 0  # full, and the lease runs
    eng.expire(a["attempt_id"])
    assert ready(eng, session) == 1  # the claim recovers it: UNKNOWN, the task to review
    assert eng.claim(session, 1) == []
    assert eng.task(task)["state"] == "NEEDS_REVIEW"
    assert ready(eng, session) == 0


def test_probe_says_yes_for_an_unknown_or_closed_session_so_the_claim_can_say_why(database, tenant):
    eng = Engine(database, tenant)
    session, _ = eng.hello()
    database.call("worker_goodbye", eng.t.namespace_id, session)
    assert ready(eng, session) == 1
    assert ready(eng, "0" * 32) == 1


@pytest.mark.parametrize("position", [2, 4, 5])
def test_probe_and_claim_find_what_is_due_on_any_queue_of_the_session(database, tenant, position):
    """The recovery guard asks the session's first four queues one by one and the rest in one
    statement (session_recovery_due): an expired lease or a due backoff on the third queue of
    six, the fifth or the sixth, behind queues with nothing due, is found by the probe and
    recovered by the claim; a lease that has not ended is not."""
    eng = Engine(database, tenant)
    queues = [eng.queue_create(backoff=300)[0] for _ in range(6)]  # ids in this order
    due_on = queues[position]
    holder, _ = eng.hello([due_on], capacity=2)
    expiring, retried = eng.submit("", due_on), eng.submit("", due_on)
    a, b = eng.claim(holder, 2)
    eng.start(holder, b["attempt_id"])
    eng.result(holder, b["attempt_id"], "failed", retryable=1)
    full, _ = eng.hello(queues, capacity=1)
    eng.submit("", queues[0])
    [mine] = eng.claim(full, 1)
    assert ready(eng, full) == 0  # no room; a's lease runs, the retry backs off for minutes
    eng.expire(a["attempt_id"])
    assert ready(eng, full) == 1
    assert eng.claim(full, 1) == []  # recovered; no room to take it
    assert eng.task(expiring)["state"] == "WAITING"
    assert ready(eng, full) == 0
    eng.due(retried)
    assert ready(eng, full) == 1
    assert eng.claim(full, 1) == []
    eng.start(full, mine["attempt_id"])
    eng.result(full, mine["attempt_id"])
    # Both back in the lane (two claims: the idle session shares the burst, W2 fairness).
    got = eng.claim(holder, 2) + eng.claim(holder, 2)
    assert sorted(g["task_id"] for g in got) == sorted([expiring, retried])
