"""A batch never waits for a key row out of key order (sql/README.md, "Lock order").

task_submit_many locks the key rows its batch names that exist (keys_lock, key order), then
makes the missing ones. A key row another submission makes and commits in between is neither
locked nor made by the batch; read under a lock afterwards, behind a row the batch holds past
it, it closed a cycle with a transaction that had taken it first in key order and then waited
for the batch's row: InnoDB killed one of the two (the benchmark's hot-key shape met it as
its keys were first made). The batch starts over (1213) instead, and the key-ordered
transaction goes on. Real MariaDB, each party on its own connection."""

from __future__ import annotations

import json
import secrets
import threading
import time

import pymysql

from orbit_shell.engine import db
from orbit_shell.engine.schema import routine_name
from tests.engine import KEY_ROW_LOCK, Engine, lock_waiting, submit_item


def deadlocks(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        return int(cur.fetchone()["Value"])


def waiting(observer, thread_id: int) -> None:
    """Return once connection ``thread_id`` waits for a row lock."""
    for _ in range(200):
        if lock_waiting(observer, thread_id):
            return
        time.sleep(0.15)  # slower than InnoDB's refresh of what lock_waiting reads
    raise AssertionError(f"connection {thread_id} never waited for a lock")


def in_thread(conn, sql: str, args: tuple) -> tuple[threading.Thread, list]:
    """Run ``sql`` on ``conn`` in a thread; the list gets its rows or its error."""
    out: list = []

    def run() -> None:
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                out.append(cur.fetchall())
                while cur.nextset():
                    pass
        except pymysql.err.MySQLError as exc:
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_batch_starts_over_rather_than_lock_a_key_row_made_after_its_keys_lock(
    database, tenant, orbit_dsn
):
    eng = Engine(database, tenant)
    ns = tenant.namespace_id
    prefix = f"order/{secrets.token_hex(4)}/"
    low, high = prefix + "a", prefix + "b"
    eng.submit(key=high)  # high's row exists; low's does not yet
    holder, batch, other, locker, watch = (db.connect(orbit_dsn) for _ in range(5))
    for conn in (holder, locker):  # transactions of their own, READ COMMITTED as Orbit's
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.autocommit(False)
    try:
        with batch.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID() AS id")
            batch_id = cur.fetchone()["id"]
        with locker.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID() AS id")
            locker_id = cur.fetchone()["id"]
        before = deadlocks(watch)
        # 1. A holder keeps high's row, so the batch's keys_lock, which finds no row for low,
        #    waits at high's.
        with holder.cursor() as cur:
            cur.execute(KEY_ROW_LOCK, (ns, high))
        items = [submit_item(eng.ids[eng.queue], key) for key in (low, high)]
        submitted, answer = in_thread(
            batch,
            f"CALL {routine_name('task_submit_many')}(%s, 'test', %s)",
            (ns, json.dumps(items)),
        )
        waiting(watch, batch_id)
        # 2. Another submission makes low's row and commits.
        with other.cursor() as cur:
            cur.execute(
                f"CALL {routine_name('task_submit_many')}(%s, 'test', %s)",
                (ns, json.dumps([submit_item(eng.ids[eng.queue], low)])),
            )
            while cur.nextset():
                pass
        # 3. A transaction takes low, then high, in key order: it waits behind the batch.
        with locker.cursor() as cur:
            cur.execute(KEY_ROW_LOCK, (ns, low))
        locked, taken = in_thread(locker, KEY_ROW_LOCK, (ns, high))
        waiting(watch, locker_id)
        # 4. The holder lets go: the batch gets high and meets low, which the locker holds.
        holder.rollback()
        submitted.join(30)
        locked.join(30)
        locker.commit()
        assert not isinstance(taken[0], Exception), f"the key-ordered locker failed: {taken[0]}"
        assert deadlocks(watch) == before, "a lock cycle was closed and InnoDB broke it"
        [error] = answer
        assert isinstance(error, pymysql.err.OperationalError) and error.args[0] == 1213, error
        # The batch's retry takes low's row in key order and goes through.
        with batch.cursor() as cur:
            cur.execute(
                f"CALL {routine_name('task_submit_many')}(%s, 'test', %s)",
                (ns, json.dumps(items)),
            )
            rows = cur.fetchall()
            while cur.nextset():
                pass
        assert [r["item_error"] for r in rows] == [None, None]
        assert deadlocks(watch) == before
    finally:
        for conn in (holder, batch, other, locker, watch):
            conn.close()
