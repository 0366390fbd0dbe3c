"""The floor under the procedure-level target: what the ceiling's own statement costs when it is
called as a procedure, and the cheapest submit -> claim -> start -> result cycle a design that
writes a task, an attempt and a history row per change could run.

Neither is Orbit code. They live in a scratch database of their own (``<database>_floor``) on
the same server, run through the same :meth:`Database.call` from the same number of threads, so
their ratios to the ceiling bound what any procedure-per-change design reaches on this machine:

- ``touch``: the ceiling's ``UPDATE`` inside a procedure (one statement, one commit per call).
- ``cycle``: four calls, each one transaction. Submit inserts the task and its history row;
  claim takes the oldest waiting task of the thread's queue (``SKIP LOCKED``), inserts the
  attempt, updates the task, adds history; start and result update the attempt and the task
  and add history. No idempotency record, permits, keys, tokens, counters, quotas, sessions,
  leases to recover or input checks: everything SPEC asks beyond those rows is left out.
"""

from __future__ import annotations

import time
from typing import Any

import pymysql
from measures import db_cpu_seconds, mariadbd_pids

from orbit_shell.engine import db
from orbit_shell.engine.db import Database

DDL = (
    "CREATE TABLE {f}.tasks (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, queue INT NOT NULL,"
    " state VARCHAR(16) NOT NULL, payload JSON NOT NULL, KEY ix_claim (queue, state, id))"
    " ENGINE=InnoDB COMMENT='benchmark floor: tasks'",
    "CREATE TABLE {f}.attempts (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " task BIGINT UNSIGNED NOT NULL, state VARCHAR(16) NOT NULL,"
    " lease_expires DATETIME(6) NOT NULL) ENGINE=InnoDB COMMENT='benchmark floor: attempts'",
    "CREATE TABLE {f}.history (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " task BIGINT UNSIGNED NOT NULL, attempt BIGINT UNSIGNED NULL, what VARCHAR(16) NOT NULL,"
    " at DATETIME(6) NOT NULL) ENGINE=InnoDB COMMENT='benchmark floor: history'",
    # The ceiling's statement (bench_ceiling in Orbit's database) as a procedure.
    """CREATE PROCEDURE {f}.touch(IN p_id INT)
    BEGIN
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      UPDATE {o}.bench_ceiling SET n = n + 1 WHERE id = p_id;
      COMMIT;
    END""",
    """CREATE PROCEDURE {f}.submit(IN p_queue INT)
    BEGIN
      DECLARE v_task BIGINT UNSIGNED;
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      INSERT INTO {f}.tasks (queue, state, payload) VALUES (p_queue, 'WAITING', '{{}}');
      SET v_task = LAST_INSERT_ID();
      INSERT INTO {f}.history (task, what, at) VALUES (v_task, 'SUBMITTED', UTC_TIMESTAMP(6));
      COMMIT;
    END""",
    """CREATE PROCEDURE {f}.claim(IN p_queue INT)
    BEGIN
      DECLARE v_task, v_attempt BIGINT UNSIGNED;
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      SELECT id INTO v_task FROM {f}.tasks WHERE queue = p_queue AND state = 'WAITING'
        ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
      INSERT INTO {f}.attempts (task, state, lease_expires)
        VALUES (v_task, 'LEASED', UTC_TIMESTAMP(6) + INTERVAL 30 SECOND);
      SET v_attempt = LAST_INSERT_ID();
      UPDATE {f}.tasks SET state = 'LEASED' WHERE id = v_task;
      INSERT INTO {f}.history (task, attempt, what, at)
        VALUES (v_task, v_attempt, 'CLAIMED', UTC_TIMESTAMP(6));
      COMMIT;
      SELECT v_attempt AS attempt_id, v_task AS task_id;
    END""",
    """CREATE PROCEDURE {f}.advance(IN p_attempt BIGINT UNSIGNED, IN p_task BIGINT UNSIGNED,
                                   IN p_state VARCHAR(16))
    BEGIN
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      UPDATE {f}.attempts SET state = p_state WHERE id = p_attempt;
      UPDATE {f}.tasks SET state = p_state WHERE id = p_task;
      INSERT INTO {f}.history (task, attempt, what, at)
        VALUES (p_task, p_attempt, p_state, UTC_TIMESTAMP(6));
      COMMIT;
    END""",
)


def install(dsn: str, ddl: tuple[str, ...] = DDL) -> str:
    """(Re)create the scratch database with ``ddl`` in it; return its name.

    Raises:
        pymysql.MySQLError: the DSN's account may not create a database.
    """
    orbit = db.parse_dsn(dsn)["database"]
    floor = f"{orbit}_floor"
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{floor}`")
            cur.execute(f"CREATE DATABASE `{floor}`")
            for statement in ddl:
                cur.execute(statement.format(f=f"`{floor}`", o=f"`{orbit}`"))
    finally:
        conn.close()
    return floor


def drop(dsn: str, floor: str) -> None:
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{floor}`")
    finally:
        conn.close()


def timed(dsn: str, threads: int, seconds: float, run_threads, body) -> float:
    """``body(database, thread)`` from ``threads`` threads for ``seconds``: rounds per second."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        d = Database(dsn, pool_size=1)
        while time.monotonic() < stop:
            body(d, i)
            done[i] += 1
        d.close()

    run_threads(loop, threads)
    return sum(done) / seconds


def run(dsn: str, threads: int, seconds: float, run_threads) -> dict[str, Any]:
    """Both floors from ``threads`` threads, each thread on its own ceiling row and queue (no row
    shared between threads, like the ceiling). Needs the ceiling's table, made first."""
    try:
        floor = install(dsn)
    except pymysql.MySQLError as exc:
        return {"skipped": f"cannot create the scratch database: {exc}"}

    def touch(d: Database, i: int) -> None:
        d.call(f"{floor}.touch", i)

    def cycle(d: Database, i: int) -> None:
        d.call(f"{floor}.submit", i)
        [[claimed]] = d.call(f"{floor}.claim", i)
        d.call(f"{floor}.advance", claimed["attempt_id"], claimed["task_id"], "RUNNING")
        d.call(f"{floor}.advance", claimed["attempt_id"], claimed["task_id"], "SUCCEEDED")

    calls = timed(dsn, threads, seconds, run_threads, touch)
    tasks = timed(dsn, threads, seconds, run_threads, cycle)
    d = Database(dsn, pool_size=1)
    attempts: list[dict] = []
    call_cpu = call_costs(
        {
            "submit": lambda n: d.call(f"{floor}.submit", threads),
            "claim": lambda n: attempts.append(d.call(f"{floor}.claim", threads)[0][0]),
            "start": lambda n: d.call(
                f"{floor}.advance", attempts[n]["attempt_id"], attempts[n]["task_id"], "RUNNING"
            ),
            "result": lambda n: d.call(
                f"{floor}.advance", attempts[n]["attempt_id"], attempts[n]["task_id"], "SUCCEEDED"
            ),
        }
    )
    d.close()
    drop(dsn, floor)
    return {
        "touch_calls_per_s": calls,
        "tasks_per_s": tasks,
        "commits_per_task": 4.0,
        "db_cpu_ms_per_call": call_cpu,
    }


def call_costs(calls: dict[str, Any], count: int = 500) -> dict[str, float]:
    """mariadbd's CPU per call of each step of a cycle, from one thread on an otherwise idle
    server: ``count`` submissions, then as many claims of one, starts and results, each
    step timed as a whole.
    ``calls`` maps each step to a function of the item's number, in cycle order."""
    pids = mariadbd_pids()
    out = {}
    for step, call in calls.items():
        c0 = db_cpu_seconds(pids)
        for n in range(count):
            call(n)
        out[step] = 1000 * (db_cpu_seconds(pids) - c0) / count
    return out
