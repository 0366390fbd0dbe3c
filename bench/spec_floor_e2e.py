"""The SPEC floor of one task per call end to end: the SPEC floor's ``POST /v1/tasks``
(``bench/http_floor.py``) with the least worker side that does what SPEC asks, served and
driven the way the celery part drives Orbit's one task per call, so the two compare with Celery
measured the same way.

Not Orbit. On the SPEC floor's server (gunicorn with ``orbit``'s settings and worker class,
Falcon) ``POST /v1/floor/turn`` is a worker's whole round in one request and one call of
``spec_turn``, as the SDK worker without prefetch makes it when its slots are full: the bearer
token checked (``workers:consume``), the session locked for its free capacity (W2), the
recovery probe over the queue's expired leases (SPEC 3), the results of the session's running
attempts within their lease recorded (attempt and task ``SUCCEEDED`` with the result and its
fingerprint, the permit deleted, a history row, the session's count given back: K6, W2), then
the queue's best claimable tasks claimed in priority order, shared with its idle sessions (W2),
each with a new attempt (public id, number, lease), its queue permit (K5) and started in the
same transaction (SPEC 3: attempt and task ``RUNNING``, two history rows); the answer is the
assignments with what the worker dispatches on. Run as a program, this module is the floor's
worker: one process, the no-op handler run inline, each turn reporting what the last one
claimed and claiming up to 100 more; a turn that finds nothing waits 2 ms before the next
(the floor's stand-in for a long poll woken at once).

Left out, as in ``bench/spec_floor.py``: keys and tokens, limits that are not set, the
namespace gates, more than one queue a session, hello and goodbye (the sessions are made
beforehand), a second route for single items, and every error answer but the call's own (an
item that is not the session's running attempt refuses the whole turn, where Orbit answers
each item).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import http_floor
import spec_floor
from measures import cpu_by_process, cpu_sample, cpu_split, pct, run_threads

from orbit_shell.sdk.client import Client

ITEMS = (
    "JSON_TABLE({j}, '$[*]' COLUMNS (seq FOR ORDINALITY, id CHAR(32) PATH '$.attempt_id',"
    " result TEXT PATH '$.result')) j"
)
TURN_MAX = 100
EMPTY_WAIT_S = 0.002

TURN = f"""CREATE PROCEDURE {{f}}.spec_turn(IN p_credential CHAR(16), IN p_sha256 CHAR(64),
  IN p_session CHAR(32), IN p_items TEXT, IN p_max INT)
BEGIN
  DECLARE v_credential BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_sha256 CHAR(64);
  DECLARE v_scopes VARCHAR(255);
  DECLARE v_revoked DATETIME(6);
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_capacity INT;
  DECLARE v_in_flight INT;
  DECLARE v_lease INT;
  DECLARE v_due TINYINT;
  DECLARE v_n INT;
  DECLARE v_ok INT;
  DECLARE v_idle INT;
  DECLARE v_claim TEXT;
  DECLARE v_first BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_granted INT DEFAULT 0;
  DECLARE v_now DATETIME(6);
  DECLARE v_who VARCHAR(200) DEFAULT CONCAT('session:', p_session);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT id, app, secret_sha256, scopes, revoked_at
    INTO v_credential, v_app, v_sha256, v_scopes, v_revoked
    FROM {{f}}.spec_credentials WHERE public_id = p_credential;
  IF v_credential IS NULL OR v_sha256 <> p_sha256 OR v_revoked IS NOT NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'UNAUTHENTICATED: invalid credentials';
  END IF;
  IF FIND_IN_SET('workers:consume', v_scopes) = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'PERMISSION_DENIED: workers:consume';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT s.id, s.queue, s.capacity, s.in_flight, q.lease_seconds
    INTO v_session, v_queue, v_capacity, v_in_flight, v_lease
    FROM {{f}}.spec_sessions s JOIN {{f}}.spec_queues q ON q.id = s.queue AND q.app = v_app
   WHERE s.public_id = p_session FOR UPDATE;
  IF v_session IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: session not found';
  END IF;
  SET v_now = UTC_TIMESTAMP(6);
  SELECT EXISTS (SELECT 1 FROM {{f}}.spec_attempts WHERE queue = v_queue
                    AND state IN ('LEASED', 'RUNNING') AND lease_expires <= v_now)
    INTO v_due;
  -- The results: every item the session's running attempt within its lease, locked.
  SELECT COUNT(*), COALESCE(SUM(a.session <=> v_session AND a.state = 'RUNNING'
                                AND a.lease_expires > v_now), 0)
    INTO v_n, v_ok
    FROM {ITEMS.format(j="p_items")}
    STRAIGHT_JOIN {{f}}.spec_attempts a ON a.public_id = j.id FOR UPDATE;
  IF v_n <> JSON_LENGTH(p_items) OR v_ok <> v_n THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: not the current holder';
  END IF;
  IF v_n > 0 THEN
    UPDATE {ITEMS.format(j="p_items")}
      STRAIGHT_JOIN {{f}}.spec_attempts a ON a.public_id = j.id
      STRAIGHT_JOIN {{f}}.spec_tasks t ON t.id = a.task
       SET a.state = 'SUCCEEDED',
           a.result_sha256 = SHA2(CONCAT('SUCCEEDED|', COALESCE(j.result, 'null')), 256),
           t.state = 'SUCCEEDED', t.result = j.result;
    DELETE p FROM {ITEMS.format(j="p_items")}
      STRAIGHT_JOIN {{f}}.spec_attempts a ON a.public_id = j.id
      STRAIGHT_JOIN {{f}}.spec_permits p ON p.attempt = a.id;
    INSERT INTO {{f}}.spec_history (task, attempt, what, who, at)
    SELECT a.task, a.id, 'SUCCEEDED', v_who, v_now
      FROM {ITEMS.format(j="p_items")} STRAIGHT_JOIN {{f}}.spec_attempts a ON a.public_id = j.id
     ORDER BY j.seq;
  END IF;
  -- The claim: the queue's best claimable tasks, in priority order (W2), shared with the
  -- queue's other sessions seen lately with nothing in flight.
  SET v_n = LEAST(p_max, v_capacity - v_in_flight + v_n);
  SELECT COUNT(*) INTO v_idle FROM {{f}}.spec_sessions
   WHERE queue = v_queue AND last_seen >= v_now - INTERVAL 5 SECOND
     AND id <> v_session AND in_flight = 0;
  SET v_n = CEIL(v_n / (1 + v_idle));
  SELECT JSON_ARRAYAGG(id) INTO v_claim
    FROM (SELECT id FROM {{f}}.spec_tasks FORCE INDEX (ix_claim)
           WHERE queue = v_queue AND state = 'WAITING' AND available_at <= v_now
             AND (deadline_at IS NULL OR deadline_at > v_now)
           ORDER BY priority, id LIMIT v_n FOR UPDATE SKIP LOCKED) c;
  IF v_claim IS NOT NULL THEN
    INSERT INTO {{f}}.spec_attempts (public_id, task, number, queue, session, state,
                                     lease_expires)
    SELECT REPLACE(UUID(), '-', ''), t.id, t.attempts_used + 1, t.queue, v_session, 'RUNNING',
           v_now + INTERVAL v_lease SECOND
      FROM JSON_TABLE(v_claim, '$[*]' COLUMNS (seq FOR ORDINALITY,
                                                id BIGINT UNSIGNED PATH '$')) c
      STRAIGHT_JOIN {{f}}.spec_tasks t ON t.id = c.id
     ORDER BY c.seq;
    SET v_granted = ROW_COUNT(), v_first = LAST_INSERT_ID();
    INSERT INTO {{f}}.spec_permits (attempt, scope, expires)
    SELECT id, queue, lease_expires FROM {{f}}.spec_attempts
     WHERE id >= v_first AND id < v_first + v_granted;
    UPDATE {{f}}.spec_attempts a STRAIGHT_JOIN {{f}}.spec_tasks t ON t.id = a.task
       SET t.state = 'RUNNING', t.attempts_used = a.number
     WHERE a.id >= v_first AND a.id < v_first + v_granted;
    INSERT INTO {{f}}.spec_history (task, attempt, what, who, at)
    SELECT a.task, a.id, e.what, v_who, v_now
      FROM {{f}}.spec_attempts a
      STRAIGHT_JOIN (SELECT 'CLAIMED' AS what UNION ALL SELECT 'RUNNING') e
     WHERE a.id >= v_first AND a.id < v_first + v_granted;
  END IF;
  UPDATE {{f}}.spec_sessions SET in_flight = in_flight - JSON_LENGTH(p_items) + v_granted,
                                 last_seen = v_now
   WHERE id = v_session;
  COMMIT;
  SELECT a.public_id AS attempt_id, a.number, a.lease_expires, t.public_id AS task_id,
         t.handler, t.handler_version, t.payload
    FROM {{f}}.spec_attempts a STRAIGHT_JOIN {{f}}.spec_tasks t ON t.id = a.task
   WHERE a.id >= v_first AND a.id < v_first + v_granted ORDER BY a.id;
END"""


def one_per_call(
    dsn: str, database, token: str, tasks: int, producers: int, workers: int, rate: float = 0.0
):
    """``tasks`` single submissions from ``producers`` threads (the SDK client's
    ``submit_task``), at ``rate`` tasks/s in all when it is set, while ``workers`` floor worker
    processes run them, timed as the e2e part times Orbit's: the workers start a second before
    the clock, which stops when the queue has nothing waiting or running. Tasks/s, the
    machine's and mariadbd's CPU per task, submit-to-start (the task's row made to its start
    recorded, both stamped by the database, as Orbit's are) and how many tasks the workers'
    turns carried."""
    queue_id = secrets.token_hex(16)
    sessions = [secrets.token_hex(16) for _ in range(workers)]
    # The token submits and works: one credential, as the e2e part's producers and workers.
    scratch = http_floor.spec_install(
        dsn, token, queue_id, (*spec_floor.DDL, TURN), "tasks:submit,workers:consume",
        sessions, TURN_MAX,
    )  # fmt: skip
    with http_floor._served(dsn, database, scratch, 4, "spec") as (_, url):
        procs = [
            subprocess.Popen(
                [sys.executable, __file__],
                env=dict(os.environ, FLOOR_URL=url, FLOOR_TOKEN=token, FLOOR_SESSION=session),
                stdout=subprocess.PIPE,
                text=True,
            )
            for session in sessions
        ]
        time.sleep(1.0)
        before, processes, began = cpu_sample(), cpu_by_process(), time.monotonic()

        produce = http_floor.single_submissions(url, token, queue_id, tasks, producers, rate=rate)
        run_threads(produce, producers)
        while time.monotonic() - began < 600:
            [left] = database.query(
                f"SELECT EXISTS (SELECT 1 FROM `{scratch}`.spec_tasks FORCE INDEX (ix_claim)"
                " WHERE queue = 1 AND state IN ('WAITING', 'RUNNING')) AS busy"
            )
            if not left["busy"]:
                break
            time.sleep(0.05)
        seconds, after, processes_after = time.monotonic() - began, cpu_sample(), cpu_by_process()
        [done] = database.query(
            f"SELECT COUNT(*) AS n FROM `{scratch}`.spec_tasks WHERE state = 'SUCCEEDED'"
        )
        started = database.query(
            f"SELECT TIMESTAMPDIFF(MICROSECOND, t.created_at, h.at) / 1000 AS ms"
            f" FROM `{scratch}`.spec_history h JOIN `{scratch}`.spec_tasks t ON t.id = h.task"
            " WHERE h.what = 'RUNNING'"
        )
        turns = {"turns": 0, "claimed": 0, "empty": 0}
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            out, _ = p.communicate(timeout=30)
            for field, value in json.loads(out.strip().splitlines()[-1]).items():
                turns[field] += value
    if done["n"] != tasks:
        raise RuntimeError(f"the SPEC floor's e2e ran {done['n']} of {tasks} tasks")
    return {
        "tasks_per_s": tasks / seconds,
        "cpu_ms_per_task": (after[0] - before[0]) * 1000 / tasks,
        "mariadbd_cpu_ms_per_task": (after[2] - before[2]) * 1000 / tasks,
        "cpu_split_ms_per_task": cpu_split(processes, processes_after, tasks),
        "cpu_busy_pct": 100 * (after[0] - before[0]) / (after[1] - before[1]),
        "paced_submit_per_s": rate,
        "submit_to_start_p50_ms": pct([float(r["ms"]) for r in started], 50),
        "tasks_per_turn": turns["claimed"] / max(1, turns["turns"] - turns["empty"]),
        **turns,
    }


def work(url: str, token: str, session: str) -> dict[str, Any]:
    """The floor's worker until SIGTERM: a turn reports what the last one claimed (the no-op
    handler's result, null) and claims up to ``TURN_MAX``; its counts when it stops."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    client = Client(url, token)
    counts = {"turns": 0, "claimed": 0, "empty": 0}
    results: list[dict[str, Any]] = []
    while True:
        last = stopping.is_set()
        body = {"session_id": session, "results": results, "max": 0 if last else TURN_MAX}
        _, answer = client.request("POST", "/v1/floor/turn", body)
        claimed = answer["attempts"]
        counts["turns"] += 1
        counts["claimed"] += len(claimed)
        results = [{"attempt_id": a["attempt_id"], "result": None} for a in claimed]
        if last:
            return counts
        if not claimed:
            counts["empty"] += 1
            time.sleep(EMPTY_WAIT_S)


if __name__ == "__main__":
    counts = work(os.environ["FLOOR_URL"], os.environ["FLOOR_TOKEN"], os.environ["FLOOR_SESSION"])
    print(json.dumps(counts), flush=True)
