"""A claim never waits on another application's rows (sql/README.md, "Locking reads").

Every writer of one application takes its row first, so two applications meet only where a
locking read strays outside its own rows. A locking range read does: InnoDB locks the first
index row past the range, and its primary row, before it sees the range has ended. The
claim's check for due DELAYED tasks of its queue was such a read; on the benchmark with an
application per thread it met the next queue's claim, which held that row's primary key while
it waited to update its index entry: one deadlock a run."""

from __future__ import annotations

import pymysql

from orbit_shell.engine import db
from orbit_shell.engine.schema import routine_name
from tests.engine import Engine


def test_a_claim_does_not_lock_the_next_queues_first_row(database, tenant_factory, orbit_dsn):
    mine, next_door = Engine(database, tenant_factory()), Engine(database, tenant_factory())
    # The next application's queue is the next queue id, so its first row of
    # ix_tasks_queue_due (queue_id, lane, available_at) is the one right after my queue's
    # (empty) range of due DELAYED tasks.
    assert next_door.ids[next_door.queue] > mine.ids[mine.queue]
    theirs = next_door.submit()
    session, _ = mine.hello()
    # The next queue's claim, as it holds its task row.
    waited = _call_while_held(
        orbit_dsn,
        theirs,
        f"CALL {routine_name('worker_claim')}(%s, %s, %s, 0)",
        (mine.t.namespace_id, session, 4),
    )
    assert waited is None, f"my claim waited on the other application's task row: {waited}"


def test_pausing_a_queue_does_not_lock_the_next_queues_first_row(
    database, tenant_factory, orbit_dsn
):
    """Pausing parks the queue's READY keyed tasks, found through a range of
    ix_tasks_queue_lane_key (queue_id, lane, concurrency_key, ...). With nothing keyed, parked
    or backing off in my queue, the first row past that range is the next queue's."""
    mine, next_door = Engine(database, tenant_factory()), Engine(database, tenant_factory())
    assert next_door.ids[next_door.queue] > mine.ids[mine.queue]
    mine.submit()  # unkeyed: stays READY, before the range
    theirs = next_door.submit()
    pause = f"CALL {routine_name('queue_set_state')}(%s, %s, 'PAUSED')"
    waited = _call_while_held(orbit_dsn, theirs, pause, (mine.t.namespace_id, mine.queue))
    assert waited is None, f"my pause waited on the other application's task row: {waited}"


def test_the_claim_and_its_probe_check_for_recovery_without_locks(database, tenant, orbit_dsn):
    """The recovery check (session_recovery_due) is a plain read. Written as a stored function
    called from `SET`, every read in it took shared locks (InnoDB locks what a statement other
    than a plain SELECT reads, READ COMMITTED or not), and the claim held them to its commit:
    against a batch start changing its attempts in another order, 20 deadlocks in an e2e run
    of 2,500 tasks on 10 hot keys."""
    eng = Engine(database, tenant)
    eng.submit()
    session, _ = eng.hello(capacity=2)
    [leased] = eng.claim(session, 2)
    other, _ = eng.hello(capacity=2)
    # A start in flight: the LEASED attempt's index entries are changing under its lock.
    start = ("UPDATE attempts SET state = 'RUNNING' WHERE public_id = %s", (leased["attempt_id"],))
    for sql, args in (
        (f"CALL {routine_name('session_ready')}(%s, %s)", (eng.t.namespace_id, other)),
        (f"CALL {routine_name('worker_claim')}(%s, %s, %s, 0)", (eng.t.namespace_id, other, 2)),
    ):
        waited = _call_while(orbit_dsn, start, sql, args)
        assert waited is None, f"{sql} waited on the starting attempt: {waited}"
    # The probe's READY check is a plain read too, past a task whose claim index entry changes.
    moving = eng.submit()
    change = ("UPDATE tasks SET priority = 1 WHERE public_id = %s", (moving,))
    probe = (f"CALL {routine_name('session_ready')}(%s, %s)", (eng.t.namespace_id, other))
    waited = _call_while(orbit_dsn, change, *probe)
    assert waited is None, f"the probe waited on a changing READY task: {waited}"


def _call_while_held(orbit_dsn: str, task: str, sql: str, args: tuple) -> Exception | None:
    """Run ``sql`` with a 1 s lock wait while another connection holds ``task``'s row (as its
    own transaction would); the lock wait it ran into, if any."""
    hold = ("SELECT id FROM tasks WHERE public_id = %s FOR UPDATE", (task,))
    return _call_while(orbit_dsn, hold, sql, args)


def _call_while(orbit_dsn: str, held: tuple, sql: str, args: tuple) -> Exception | None:
    """Run ``sql`` with a 1 s lock wait while another connection's open transaction has run
    ``held`` (a statement and its arguments); the lock wait it ran into, if any."""
    holder = db.connect(orbit_dsn, autocommit=False)
    caller = db.connect(
        orbit_dsn, init_command="SET time_zone = '+00:00', innodb_lock_wait_timeout = 1"
    )
    try:
        with holder.cursor() as cur:
            cur.execute(*held)
        with caller.cursor() as cur:
            try:
                cur.execute(sql, args)
                while cur.nextset():
                    pass
            except pymysql.err.OperationalError as exc:
                return exc
        return None
    finally:
        holder.rollback()
        holder.close()
        caller.close()
