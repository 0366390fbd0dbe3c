"""The SPEC floor: the cheapest single-call cycle that still writes and checks what SPEC asks of
each change, beside the floor (``bench/floor.py``, task, attempt and history rows only).

Not Orbit. It lives in the floor's scratch database and runs the same way (the same threads,
each on a queue and a session of its own, and mariadbd's CPU per call from one thread), so the
two floors' ratio says what SPEC's own rows and checks cost on this machine, whatever the
design, and Orbit's ratio to it what Orbit spends beyond them. Per change, beyond the floor:

- submit: the queue and its application read for their backlog quotas (a quota is exact, so
  every submission reads whether one is set), the Idempotency-Key looked up and recorded (K1),
  the handler, its version and the payload's version kept for the worker, public ids (the API
  names tasks and attempts by them), the history row's actor;
- the tasks' indexes SPEC's reads need: the claim's in priority order (W2), the lanes where
  a retry's backoff and a deadline end (SPEC 3), and one per filter of `GET /v1/tasks` with
  its cursor (queue, state, business key, concurrency key, none);
- claim: the session row locked for its free capacity and counted (W2), the queue's permit
  limit and the application's quota read (K5: one claim transaction reserves both), the
  recovery probe over the queue's expired leases (SPEC 3: recovery runs inside claims), a task
  whose retry backoff has ended and whose total deadline has not passed (SPEC 3), a public id,
  a number and a lease for the attempt, its queue permit row (K5), and the answer W2 names:
  the attempt's id, number and lease, and the task with what the worker dispatches on
  (handler and version, payload, its key: K3);
- start: the session resolved by its public id, the attempt locked by its public id and
  checked (holder, state, lease), then as the floor;
- result: as start, the result's fingerprint stored for the duplicate check, the permit row
  deleted and the session's count given back (K6, W2), and the answer names the task too (W7:
  `{attempt, task}`).

Left out, as no design needs them on this path: keys, tokens, limits that are not set, the
namespace gates, more than one queue a session, fairness across sessions (a claim of one has
nothing to share; ``bench/spec_floor_keys.py``'s claims of several share), and the task
detail Orbit's answers carry beyond what SPEC names (queue, payload version, business key,
priority, attempts, deadline, times).
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import floor

from orbit_shell.engine import db
from orbit_shell.engine.db import Database

# The tasks table's columns and the indexes SPEC's reads need: the claim in priority order
# (W2), a backoff's and a deadline's wait ending (SPEC 3), and GET /v1/tasks by each of its
# filters with a cursor. Without its closing parenthesis: bench/spec_floor_keys.py adds one.
TASKS = (
    "(id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " public_id CHAR(32) NOT NULL UNIQUE, namespace_id BIGINT UNSIGNED NOT NULL DEFAULT 1,"
    " queue BIGINT UNSIGNED NOT NULL, handler VARCHAR(200) NOT NULL DEFAULT '',"
    " handler_version VARCHAR(64) NOT NULL DEFAULT '',"
    " payload_version VARCHAR(64) NOT NULL DEFAULT '', attempts_used INT NOT NULL DEFAULT 0,"
    " state VARCHAR(16) NOT NULL, priority TINYINT NOT NULL,"
    " business_key VARCHAR(255) NULL, concurrency_key VARCHAR(191) NOT NULL DEFAULT '',"
    " available_at DATETIME(6) NOT NULL, deadline_at DATETIME(6) NULL,"
    " payload JSON NOT NULL, result MEDIUMTEXT NULL, created_at DATETIME(6) NOT NULL,"
    " KEY ix_claim (queue, state, priority, id), KEY ix_due (queue, state, available_at),"
    " KEY ix_deadline (state, deadline_at), KEY ix_ns (namespace_id, id),"
    " KEY ix_ns_state (namespace_id, state, id), KEY ix_ns_queue (namespace_id, queue, id),"
    " KEY ix_ns_business (namespace_id, business_key, id),"
    " KEY ix_ns_key (namespace_id, concurrency_key, id)"
)

# What both submissions declare, and their acceptance once the queue is known: the
# Idempotency-Key looked up and recorded, the task and its history row, and the receipt.
_SUBMIT_DECLARE = """
      DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_queue BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_max INT;
      DECLARE v_app_max INT;
      DECLARE v_fp CHAR(64);
      DECLARE v_now DATETIME(6);
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"""
_SUBMIT_ACCEPT = """
      START TRANSACTION;
      SELECT fingerprint, task INTO v_fp, v_task FROM {f}.spec_idempotency
       WHERE queue = v_queue AND idem_key = p_key;
      IF v_task IS NULL THEN
        SET v_now = UTC_TIMESTAMP(6);
        INSERT INTO {f}.spec_tasks (public_id, queue, handler, handler_version, payload_version,
                                    priority, state, available_at, payload, created_at)
          VALUES (REPLACE(UUID(), '-', ''), v_queue, {fields}, 'WAITING', v_now, p_payload,
                  v_now);
        SET v_task = LAST_INSERT_ID();
        INSERT INTO {f}.spec_idempotency VALUES (v_queue, p_key, p_fp, v_task);
        INSERT INTO {f}.spec_history (task, what, who, at)
          VALUES (v_task, 'SUBMITTED', CONCAT('credential:', {who}), v_now);
      ELSEIF v_fp <> p_fp THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'IDEMPOTENCY_CONFLICT: other content';
      END IF;
      COMMIT;
      SELECT public_id AS task_id, state, created_at, v_fp IS NULL AS created
        FROM {f}.spec_tasks WHERE id = v_task;
    END"""

DDL = (
    "CREATE TABLE {f}.spec_apps (id BIGINT UNSIGNED PRIMARY KEY, max_active INT NULL,"
    " max_unfinished INT NULL) ENGINE=InnoDB COMMENT='SPEC floor: applications and quotas'",
    "CREATE TABLE {f}.spec_queues (id BIGINT UNSIGNED PRIMARY KEY,"
    " app BIGINT UNSIGNED NOT NULL, max_concurrency INT NULL, max_unfinished INT NULL,"
    " lease_seconds INT NOT NULL, public_id CHAR(32) NULL UNIQUE)"
    " ENGINE=InnoDB COMMENT='SPEC floor: queues (a public id where the HTTP floor names one)'",
    "CREATE TABLE {f}.spec_credentials (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " public_id CHAR(16) NOT NULL UNIQUE, app BIGINT UNSIGNED NOT NULL,"
    " secret_sha256 CHAR(64) NOT NULL, scopes VARCHAR(255) NOT NULL, revoked_at DATETIME(6) NULL)"
    " ENGINE=InnoDB COMMENT='SPEC floor: bearer credentials (the HTTP SPEC floor)'",
    "CREATE TABLE {f}.spec_sessions (id BIGINT UNSIGNED PRIMARY KEY,"
    " public_id CHAR(32) NOT NULL UNIQUE, queue BIGINT UNSIGNED NOT NULL, capacity INT NOT NULL,"
    " in_flight INT NOT NULL, last_seen DATETIME(6) NOT NULL)"
    " ENGINE=InnoDB COMMENT='SPEC floor: worker sessions'",
    "CREATE TABLE {f}.spec_tasks " + TASKS + ") ENGINE=InnoDB COMMENT='SPEC floor: tasks'",
    "CREATE TABLE {f}.spec_idempotency (queue BIGINT UNSIGNED NOT NULL,"
    " idem_key VARCHAR(255) NOT NULL, fingerprint CHAR(64) NOT NULL,"
    " task BIGINT UNSIGNED NOT NULL, PRIMARY KEY (queue, idem_key))"
    " ENGINE=InnoDB COMMENT='SPEC floor: Idempotency-Keys'",
    "CREATE TABLE {f}.spec_attempts (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " public_id CHAR(32) NOT NULL UNIQUE, task BIGINT UNSIGNED NOT NULL,"
    " number INT NOT NULL, queue BIGINT UNSIGNED NOT NULL, session BIGINT UNSIGNED NOT NULL,"
    " state VARCHAR(16) NOT NULL, lease_expires DATETIME(6) NOT NULL,"
    " result_sha256 CHAR(64) NULL, KEY ix_lease (queue, state, lease_expires))"
    " ENGINE=InnoDB COMMENT='SPEC floor: attempts'",
    "CREATE TABLE {f}.spec_permits (attempt BIGINT UNSIGNED PRIMARY KEY,"
    " scope BIGINT UNSIGNED NOT NULL, expires DATETIME(6) NOT NULL)"
    " ENGINE=InnoDB COMMENT='SPEC floor: queue permits'",
    "CREATE TABLE {f}.spec_history (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " task BIGINT UNSIGNED NOT NULL, attempt BIGINT UNSIGNED NULL, what VARCHAR(16) NOT NULL,"
    " who VARCHAR(200) NOT NULL, at DATETIME(6) NOT NULL)"
    " ENGINE=InnoDB COMMENT='SPEC floor: history'",
    """CREATE PROCEDURE {f}.spec_submit(IN p_queue BIGINT UNSIGNED, IN p_key VARCHAR(255),
                                       IN p_fp CHAR(64), IN p_payload TEXT)
    BEGIN"""
    + _SUBMIT_DECLARE
    + """
      SELECT q.id, q.max_unfinished, a.max_unfinished INTO v_queue, v_max, v_app_max
        FROM {f}.spec_queues q JOIN {f}.spec_apps a ON a.id = q.app WHERE q.id = p_queue;
      IF v_queue IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
      END IF;"""
    + _SUBMIT_ACCEPT.replace("{fields}", "'noop', 'v1', 'v1', 5").replace("{who}", "1"),
    # POST /v1/tasks's SPEC floor (bench/http_floor.py, FLOOR_KIND spec): the credential, its
    # scope and the queue in its namespace read in one statement before the same acceptance.
    """CREATE PROCEDURE {f}.spec_submit_as(IN p_credential CHAR(16), IN p_sha256 CHAR(64),
      IN p_queue CHAR(32), IN p_key VARCHAR(255), IN p_fp CHAR(64), IN p_payload TEXT,
      IN p_handler VARCHAR(200), IN p_handler_version VARCHAR(64),
      IN p_payload_version VARCHAR(64), IN p_priority TINYINT UNSIGNED)
    BEGIN
      DECLARE v_credential BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_sha256 CHAR(64);
      DECLARE v_scopes VARCHAR(255);
      DECLARE v_revoked DATETIME(6);"""
    + _SUBMIT_DECLARE
    + """
      SELECT c.id, c.secret_sha256, c.scopes, c.revoked_at, q.id, q.max_unfinished,
             a.max_unfinished
        INTO v_credential, v_sha256, v_scopes, v_revoked, v_queue, v_max, v_app_max
        FROM {f}.spec_credentials c JOIN {f}.spec_apps a ON a.id = c.app
        LEFT JOIN {f}.spec_queues q ON q.app = c.app AND q.public_id = p_queue
       WHERE c.public_id = p_credential;
      IF v_credential IS NULL OR v_sha256 <> p_sha256 OR v_revoked IS NOT NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'UNAUTHENTICATED: invalid credentials';
      END IF;
      IF FIND_IN_SET('tasks:submit', v_scopes) = 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'PERMISSION_DENIED: tasks:submit';
      END IF;
      IF v_queue IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
      END IF;"""
    + _SUBMIT_ACCEPT.replace(
        "{fields}", "p_handler, p_handler_version, p_payload_version, p_priority"
    ).replace("{who}", "v_credential"),
    """CREATE PROCEDURE {f}.spec_claim(IN p_session CHAR(32))
    BEGIN
      DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_queue BIGINT UNSIGNED;
      DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_capacity INT;
      DECLARE v_in_flight INT;
      DECLARE v_lease INT;
      DECLARE v_q_max INT;
      DECLARE v_app_max INT;
      DECLARE v_number INT;
      DECLARE v_due TINYINT;
      DECLARE v_now DATETIME(6);
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      SELECT s.id, s.queue, s.capacity, s.in_flight, q.lease_seconds, q.max_concurrency,
             a.max_active
        INTO v_session, v_queue, v_capacity, v_in_flight, v_lease, v_q_max, v_app_max
        FROM {f}.spec_sessions s JOIN {f}.spec_queues q ON q.id = s.queue
        JOIN {f}.spec_apps a ON a.id = q.app
       WHERE s.public_id = p_session FOR UPDATE;
      IF v_session IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: session not found';
      END IF;
      SET v_now = UTC_TIMESTAMP(6);
      SELECT EXISTS (SELECT 1 FROM {f}.spec_attempts WHERE queue = v_queue
                        AND state IN ('LEASED', 'RUNNING') AND lease_expires <= v_now)
        INTO v_due;
      -- Neither limit is set here: a design that keeps one counts it under a lock (not
      -- measured), and one that keeps none reads that it is not set, as here.
      IF v_in_flight < v_capacity AND v_q_max IS NULL AND v_app_max IS NULL THEN
        SELECT id, attempts_used + 1 INTO v_task, v_number FROM {f}.spec_tasks
         WHERE queue = v_queue AND state = 'WAITING' AND available_at <= v_now
           AND (deadline_at IS NULL OR deadline_at > v_now)
         ORDER BY priority, id LIMIT 1 FOR UPDATE SKIP LOCKED;
      END IF;
      IF v_task IS NOT NULL THEN
        INSERT INTO {f}.spec_attempts (public_id, task, number, queue, session, state,
                                       lease_expires)
          VALUES (REPLACE(UUID(), '-', ''), v_task, v_number, v_queue, v_session, 'LEASED',
                  v_now + INTERVAL v_lease SECOND);
        SET v_attempt = LAST_INSERT_ID();
        INSERT INTO {f}.spec_permits VALUES (v_attempt, v_queue, v_now + INTERVAL v_lease SECOND);
        UPDATE {f}.spec_tasks SET state = 'LEASED', attempts_used = v_number WHERE id = v_task;
        INSERT INTO {f}.spec_history (task, attempt, what, who, at)
          VALUES (v_task, v_attempt, 'CLAIMED', CONCAT('session:', p_session), v_now);
        UPDATE {f}.spec_sessions SET in_flight = in_flight + 1, last_seen = v_now
         WHERE id = v_session;
      END IF;
      COMMIT;
      SELECT a.public_id AS attempt_id, a.number AS attempt_number, a.lease_expires,
             t.public_id AS task_id, t.handler, t.handler_version, t.payload,
             t.concurrency_key
        FROM {f}.spec_attempts a JOIN {f}.spec_tasks t ON t.id = a.task WHERE a.id = v_attempt;
    END""",
    """CREATE PROCEDURE {f}.spec_advance(IN p_session CHAR(32), IN p_attempt CHAR(32),
                                        IN p_state VARCHAR(16), IN p_result TEXT)
    BEGIN
      DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_holder BIGINT UNSIGNED;
      DECLARE v_task BIGINT UNSIGNED;
      DECLARE v_state VARCHAR(16);
      DECLARE v_expires DATETIME(6);
      DECLARE v_stored CHAR(64);
      DECLARE v_fp CHAR(64) DEFAULT SHA2(CONCAT(p_state, '|', COALESCE(p_result, 'null')), 256);
      DECLARE v_now DATETIME(6);
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      START TRANSACTION;
      SELECT id INTO v_session FROM {f}.spec_sessions WHERE public_id = p_session;
      SELECT id, task, state, lease_expires, session, result_sha256
        INTO v_attempt, v_task, v_state, v_expires, v_holder, v_stored
        FROM {f}.spec_attempts WHERE public_id = p_attempt FOR UPDATE;
      SET v_now = UTC_TIMESTAMP(6);
      IF p_state = 'RUNNING' THEN
        IF NOT (v_holder <=> v_session) OR v_state <> 'LEASED' OR v_expires <= v_now THEN
          SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: not the current holder';
        END IF;
        UPDATE {f}.spec_attempts SET state = 'RUNNING' WHERE id = v_attempt;
        UPDATE {f}.spec_tasks SET state = 'RUNNING' WHERE id = v_task;
        INSERT INTO {f}.spec_history (task, attempt, what, who, at)
          VALUES (v_task, v_attempt, p_state, CONCAT('session:', p_session), v_now);
      ELSEIF NOT (v_holder <=> v_session AND v_stored <=> v_fp) THEN
        IF NOT (v_holder <=> v_session) OR v_state <> 'RUNNING' OR v_expires <= v_now THEN
          SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: not the current holder';
        END IF;
        UPDATE {f}.spec_attempts SET state = p_state, result_sha256 = v_fp WHERE id = v_attempt;
        DELETE FROM {f}.spec_permits WHERE attempt = v_attempt;
        UPDATE {f}.spec_sessions SET in_flight = in_flight - 1 WHERE id = v_session;
        UPDATE {f}.spec_tasks SET state = p_state, result = p_result WHERE id = v_task;
        INSERT INTO {f}.spec_history (task, attempt, what, who, at)
          VALUES (v_task, v_attempt, p_state, CONCAT('session:', p_session), v_now);
      END IF;
      COMMIT;
      SELECT p_attempt AS attempt_id, a.state, a.lease_expires, t.public_id AS task_id,
             t.state AS task_state
        FROM {f}.spec_attempts a JOIN {f}.spec_tasks t ON t.id = a.task WHERE a.id = v_attempt;
    END""",
)


def run(dsn: str, threads: int, seconds: float, run_threads) -> dict[str, Any]:
    """The SPEC floor's cycle from ``threads`` threads, each on a queue and a session of its
    own, then mariadbd's CPU per call of each step from one thread."""
    scratch = floor.install(dsn, DDL)  # the floor's own install succeeded on this server
    sessions = [secrets.token_hex(16) for _ in range(threads + 1)]
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            for n, public in enumerate(sessions, start=1):
                cur.execute(f"INSERT INTO `{scratch}`.spec_apps VALUES (%s, NULL, NULL)", (n,))
                cur.execute(
                    f"INSERT INTO `{scratch}`.spec_queues VALUES (%s, %s, NULL, NULL, 30, NULL)",
                    (n, n),
                )
                cur.execute(
                    f"INSERT INTO `{scratch}`.spec_sessions"
                    " VALUES (%s, %s, %s, 1000000, 0, UTC_TIMESTAMP(6))",
                    (n, public, n),
                )
        conn.commit()
    finally:
        conn.close()

    def submit(d: Database, n: int) -> None:
        key = secrets.token_hex(12)
        fp = hashlib.sha256(key.encode()).hexdigest()
        d.call(f"{scratch}.spec_submit", n, key, fp, "{}")

    def advance(d: Database, n: int, attempt: str, state: str) -> None:
        d.call(f"{scratch}.spec_advance", sessions[n - 1], attempt, state, None)

    def cycle(d: Database, i: int) -> None:
        submit(d, i + 1)
        [[claimed]] = d.call(f"{scratch}.spec_claim", sessions[i])
        advance(d, i + 1, claimed["attempt_id"], "RUNNING")
        advance(d, i + 1, claimed["attempt_id"], "SUCCEEDED")

    tasks = floor.timed(dsn, threads, seconds, run_threads, cycle)
    d = Database(dsn, pool_size=1)
    last, attempts = threads + 1, []
    call_cpu = floor.call_costs(
        {
            "submit": lambda n: submit(d, last),
            "claim": lambda n: attempts.append(
                d.call(f"{scratch}.spec_claim", sessions[last - 1])[0][0]["attempt_id"]
            ),
            "start": lambda n: advance(d, last, attempts[n], "RUNNING"),
            "result": lambda n: advance(d, last, attempts[n], "SUCCEEDED"),
        }
    )
    d.close()
    floor.drop(dsn, scratch)
    return {"tasks_per_s": tasks, "commits_per_task": 4.0, "db_cpu_ms_per_call": call_cpu}
