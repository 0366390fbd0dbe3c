"""The SPEC floor of a hot key's turn: the cheapest report-and-claim that starts what it
claims and still does what SPEC asks, measured as the phases part measures Orbit's key turns.

Not Orbit. It lives in the floor's scratch database (``bench/floor.py``). A session holds one
running task of each of ``keys`` keys, each key with a backlog of parked tasks; a turn is one
call, as the SDK worker without prefetch makes it (SPEC 3: the start is its own change, with
its own history row, committed before business code runs; here in the claim's transaction):

- ``spec_key_turn``: the session locked for its capacity (W2), the recovery probe over the
  queue's expired leases (SPEC 3: recovery runs inside claims), the items' attempts locked by
  their public ids and checked (holder, RUNNING, lease); each attempt and its task
  SUCCEEDED with the result's fingerprint, both its permits deleted, a history row; each
  freed key's holder cleared and its next parked task (priority, then age, read through an
  index on the key: K8, no scan) made claimable; then the claim of the queue's best
  claimable tasks in priority order (W2), those whose backoff has ended and whose total
  deadline has not passed (SPEC 3), shared with the queue's idle sessions (W2: fair across
  worker nodes), each keyed one granted only where its key has no
  holder, with a new attempt (public id, lease), its queue and key permits (K5), the key's
  token raised and persisted (K7), and each grant started: attempt and task RUNNING, with
  two history rows carrying the token (claimed, started); the answer is the assignments.

Left out, as in ``bench/spec_floor.py``: the namespace gates, limits that are not set, more than
one queue a session, a second route for single items, the task detail Orbit's answers carry
beyond a few columns, and every error answer but the call's own (an item that is not the
session's refuses the whole call here, where Orbit answers each item).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import floor
import spec_floor
from measures import key_turn_costs

from orbit_shell.engine import db
from orbit_shell.engine.db import Database

# Item lists as JSON: the same JSON_TABLE read Orbit's batch procedures use.
ITEMS = "JSON_TABLE({j}, '$[*]' COLUMNS (seq FOR ORDINALITY, id CHAR(32) PATH '$')) j"

DDL = (
    "CREATE TABLE {f}.kq (id BIGINT UNSIGNED PRIMARY KEY, lease_seconds INT NOT NULL)"
    " ENGINE=InnoDB COMMENT='SPEC key floor: queues'",
    "CREATE TABLE {f}.ks (id BIGINT UNSIGNED PRIMARY KEY, public_id CHAR(32) NOT NULL UNIQUE,"
    " queue BIGINT UNSIGNED NOT NULL, capacity INT NOT NULL, in_flight INT NOT NULL,"
    " last_seen DATETIME(6) NOT NULL, KEY ix_seen (queue, last_seen))"
    " ENGINE=InnoDB COMMENT='SPEC key floor: worker sessions'",
    "CREATE TABLE {f}.kk (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " namespace_id BIGINT UNSIGNED NOT NULL, concurrency_key VARCHAR(191) NOT NULL,"
    " token BIGINT UNSIGNED NOT NULL, holder BIGINT UNSIGNED NULL,"
    " UNIQUE KEY uq_key (namespace_id, concurrency_key))"
    " ENGINE=InnoDB COMMENT='SPEC key floor: keys, their tokens and holders'",
    # The SPEC floor's tasks, and the key's parked tasks in claim order (K8). PARKED and
    # WAITING are one column: a parked task is WAITING to SPEC's reads.
    "CREATE TABLE {f}.kt " + spec_floor.TASKS + ","
    " KEY ix_key_parked (namespace_id, concurrency_key, state, priority, id))"
    " ENGINE=InnoDB COMMENT='SPEC key floor: tasks'",
    "CREATE TABLE {f}.ka (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " public_id CHAR(32) NOT NULL UNIQUE, task BIGINT UNSIGNED NOT NULL,"
    " queue BIGINT UNSIGNED NOT NULL, session BIGINT UNSIGNED NOT NULL,"
    " resource BIGINT UNSIGNED NOT NULL, token BIGINT UNSIGNED NOT NULL,"
    " state VARCHAR(16) NOT NULL, lease_expires DATETIME(6) NOT NULL,"
    " result_sha256 CHAR(64) NULL, KEY ix_lease (queue, state, lease_expires))"
    " ENGINE=InnoDB COMMENT='SPEC key floor: attempts'",
    "CREATE TABLE {f}.kp (attempt BIGINT UNSIGNED NOT NULL, kind CHAR(5) NOT NULL,"
    " scope BIGINT UNSIGNED NOT NULL, expires DATETIME(6) NOT NULL,"
    " PRIMARY KEY (attempt, kind)) ENGINE=InnoDB COMMENT='SPEC key floor: queue and key permits'",
    "CREATE TABLE {f}.kh (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"
    " task BIGINT UNSIGNED NOT NULL, attempt BIGINT UNSIGNED NULL, token BIGINT UNSIGNED NULL,"
    " what VARCHAR(16) NOT NULL, who VARCHAR(200) NOT NULL, at DATETIME(6) NOT NULL)"
    " ENGINE=InnoDB COMMENT='SPEC key floor: history'",
    f"""CREATE PROCEDURE {{f}}.spec_key_turn(IN p_session CHAR(32), IN p_items TEXT, IN p_max INT)
    BEGIN
      DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
      DECLARE v_queue BIGINT UNSIGNED;
      DECLARE v_capacity INT;
      DECLARE v_in_flight INT;
      DECLARE v_lease INT;
      DECLARE v_due TINYINT;
      DECLARE v_n INT;
      DECLARE v_ok INT;
      DECLARE v_next TEXT;
      DECLARE v_claim TEXT;
      DECLARE v_first BIGINT UNSIGNED DEFAULT 0;
      DECLARE v_granted INT DEFAULT 0;
      DECLARE v_idle INT;
      DECLARE v_now DATETIME(6);
      DECLARE v_who VARCHAR(200) DEFAULT CONCAT('session:', p_session);
      DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      SELECT s.id, s.queue, s.capacity, s.in_flight, q.lease_seconds
        INTO v_session, v_queue, v_capacity, v_in_flight, v_lease
        FROM {{f}}.ks s JOIN {{f}}.kq q ON q.id = s.queue
       WHERE s.public_id = p_session FOR UPDATE;
      IF v_session IS NULL THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: session not found';
      END IF;
      SET v_now = UTC_TIMESTAMP(6);
      SELECT EXISTS (SELECT 1 FROM {{f}}.ka WHERE queue = v_queue
                        AND state IN ('LEASED', 'RUNNING') AND lease_expires <= v_now)
        INTO v_due;
      -- The results: every item the session's running attempt within its lease, locked, or
      -- nothing changes (Orbit answers each item; the floor refuses the call).
      SELECT COUNT(*), COALESCE(SUM(a.session <=> v_session AND a.state = 'RUNNING'
                                    AND a.lease_expires > v_now), 0)
        INTO v_n, v_ok
        FROM {ITEMS.format(j="p_items")}
        STRAIGHT_JOIN {{f}}.ka a ON a.public_id = j.id FOR UPDATE;
      IF v_n <> JSON_LENGTH(p_items) OR v_ok <> v_n THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: not the current holder';
      END IF;
      IF v_n > 0 THEN
        UPDATE {ITEMS.format(j="p_items")}
          STRAIGHT_JOIN {{f}}.ka a ON a.public_id = j.id
          STRAIGHT_JOIN {{f}}.kt t ON t.id = a.task
          STRAIGHT_JOIN {{f}}.kk k ON k.id = a.resource
           SET a.state = 'SUCCEEDED', a.result_sha256 = SHA2('succeeded|0|null|null', 256),
               t.state = 'SUCCEEDED', k.holder = NULL;
        DELETE p FROM {ITEMS.format(j="p_items")}
          STRAIGHT_JOIN {{f}}.ka a ON a.public_id = j.id
          STRAIGHT_JOIN {{f}}.kp p ON p.attempt = a.id;
        INSERT INTO {{f}}.kh (task, attempt, token, what, who, at)
        SELECT a.task, a.id, a.token, 'SUCCEEDED', v_who, v_now
          FROM {ITEMS.format(j="p_items")} STRAIGHT_JOIN {{f}}.ka a ON a.public_id = j.id
         ORDER BY j.seq;
        -- Each freed key's next parked task, through the key's index (K8), made claimable.
        SELECT JSON_ARRAYAGG((SELECT t.id FROM {{f}}.kt t FORCE INDEX (ix_key_parked)
                               WHERE t.namespace_id = k.namespace_id
                                 AND t.concurrency_key = k.concurrency_key
                                 AND t.state = 'PARKED'
                               ORDER BY t.priority, t.id LIMIT 1))
          INTO v_next
          FROM {ITEMS.format(j="p_items")}
          STRAIGHT_JOIN {{f}}.ka a ON a.public_id = j.id
          STRAIGHT_JOIN {{f}}.kk k ON k.id = a.resource;
        UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) n
          STRAIGHT_JOIN {{f}}.kt t ON t.id = n.id
           SET t.state = 'WAITING' WHERE t.state = 'PARKED';
      END IF;
      -- The claim: the queue's best claimable tasks, in priority order (W2).
      SET v_n = LEAST(p_max, v_capacity - v_in_flight + v_n);
      -- Fair across worker nodes (W2): a claim of several shares them with the queue's other
      -- sessions seen lately with nothing in flight.
      SELECT COUNT(*) INTO v_idle FROM {{f}}.ks FORCE INDEX (ix_seen)
       WHERE queue = v_queue AND last_seen >= v_now - INTERVAL 5 SECOND
         AND id <> v_session AND in_flight = 0;
      SET v_n = CEIL(v_n / (1 + v_idle));
      SELECT JSON_ARRAYAGG(id) INTO v_claim
        FROM (SELECT id FROM {{f}}.kt FORCE INDEX (ix_claim)
               WHERE queue = v_queue AND state = 'WAITING' AND available_at <= v_now
                 AND (deadline_at IS NULL OR deadline_at > v_now)
               ORDER BY priority, id LIMIT v_n FOR UPDATE SKIP LOCKED) c;
      IF v_claim IS NOT NULL THEN
        INSERT INTO {{f}}.ka (public_id, task, queue, session, resource, token, state,
                              lease_expires)
        SELECT REPLACE(UUID(), '-', ''), t.id, t.queue, v_session, k.id, k.token + 1, 'RUNNING',
               v_now + INTERVAL v_lease SECOND
          FROM JSON_TABLE(v_claim, '$[*]' COLUMNS (seq FOR ORDINALITY,
                                                    id BIGINT UNSIGNED PATH '$')) c
          STRAIGHT_JOIN {{f}}.kt t ON t.id = c.id
          STRAIGHT_JOIN {{f}}.kk k ON k.namespace_id = t.namespace_id
                                  AND k.concurrency_key = t.concurrency_key
         ORDER BY c.seq;
        SET v_granted = ROW_COUNT(), v_first = LAST_INSERT_ID();
        -- The key's token persisted and its holder written only where there is none.
        UPDATE {{f}}.ka a STRAIGHT_JOIN {{f}}.kk k ON k.id = a.resource
           SET k.token = a.token, k.holder = a.id
         WHERE a.id BETWEEN v_first AND v_first + v_granted - 1 AND k.holder IS NULL;
        IF ROW_COUNT() <> v_granted THEN
          SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: a held key was granted';
        END IF;
        INSERT INTO {{f}}.kp (attempt, kind, scope, expires)
        SELECT a.id, k.kind, IF(k.kind = 'KEY', a.resource, a.queue), a.lease_expires
          FROM {{f}}.ka a STRAIGHT_JOIN (SELECT 'QUEUE' AS kind UNION ALL SELECT 'KEY') k
         WHERE a.id BETWEEN v_first AND v_first + v_granted - 1;
        UPDATE {{f}}.ka a STRAIGHT_JOIN {{f}}.kt t ON t.id = a.task SET t.state = 'RUNNING'
         WHERE a.id BETWEEN v_first AND v_first + v_granted - 1;
        INSERT INTO {{f}}.kh (task, attempt, token, what, who, at)
        SELECT a.task, a.id, a.token, e.what, v_who, v_now
          FROM {{f}}.ka a STRAIGHT_JOIN (SELECT 'CLAIMED' AS what UNION ALL SELECT 'RUNNING') e
         WHERE a.id BETWEEN v_first AND v_first + v_granted - 1;
      END IF;
      UPDATE {{f}}.ks SET in_flight = in_flight - JSON_LENGTH(p_items) + v_granted,
                          last_seen = v_now
       WHERE id = v_session;
      COMMIT;
      SELECT a.public_id AS attempt_id, a.token, t.public_id AS task_id, t.concurrency_key,
             t.payload, a.lease_expires
        FROM {{f}}.ka a STRAIGHT_JOIN {{f}}.kt t ON t.id = a.task
       WHERE a.id BETWEEN v_first AND v_first + v_granted - 1 ORDER BY a.id;
    END""",
)


def key_turns(dsn: str, keys: int, turns: int) -> dict[str, Any]:
    """One thread on an otherwise idle server, as ``Bench.key_turns`` measures Orbit's: a
    session holds one running task of each of ``keys`` keys, each key with a backlog; a turn
    reports them all and claims and starts each key's next task, in one call. Wall time and
    mariadbd CPU per turn and per task; the first five turns are not counted."""
    turn, close = key_turn(dsn, keys, turns + 5)
    try:
        return key_turn_costs(turn, turns, keys)
    finally:
        close()


def key_turn(dsn: str, keys: int, turns: int) -> tuple[Callable[[], int], Callable[[], None]]:
    """The SPEC floor's scratch database with a session holding one running task of each of
    ``keys`` keys, each with a backlog for ``turns`` turns: returns ``turn()``, which makes one
    turn and returns how many tasks it claimed, and ``close()``, which drops the database."""
    scratch = floor.install(dsn, DDL)
    session = secrets.token_hex(16)
    prefix = secrets.token_hex(4)
    backlog = turns + 1
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{scratch}`.kq VALUES (1, 3600)")
            cur.execute(
                f"INSERT INTO `{scratch}`.ks VALUES (1, %s, 1, 1000000, 0, UTC_TIMESTAMP(6))",
                (session,),
            )
            for k in range(keys):
                key = f"{prefix}-{k}"
                cur.execute(
                    f"INSERT INTO `{scratch}`.kk (namespace_id, concurrency_key, token)"
                    " VALUES (1, %s, 0)",
                    (key,),
                )
                rows = [
                    (secrets.token_hex(16), "WAITING" if n == 0 else "PARKED", key)
                    for n in range(backlog)
                ]
                cur.executemany(
                    f"INSERT INTO `{scratch}`.kt (public_id, queue, state, priority,"
                    " concurrency_key, available_at, payload, created_at)"
                    " VALUES (%s, 1, %s, 5, %s, UTC_TIMESTAMP(6), '{}', UTC_TIMESTAMP(6))",
                    rows,
                )
        conn.commit()
    finally:
        conn.close()
    d = Database(dsn, pool_size=1)
    turn_call = f"`{scratch}`.spec_key_turn"
    [rows] = d.call(turn_call, session, "[]", keys)
    held = [r["attempt_id"] for r in rows]

    def turn() -> int:
        nonlocal held
        [rows] = d.call(turn_call, session, json.dumps(held), keys)
        held = [r["attempt_id"] for r in rows]
        return len(held)

    def close() -> None:
        d.close()
        floor.drop(dsn, scratch)

    return turn, close
