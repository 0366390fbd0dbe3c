-- attempt_grant: turn one READY candidate into a LEASED attempt (the body of worker_claim), or,
-- with p_start, into a RUNNING one: the claim asked to start what it grants (W3), and the
-- attempt and its task are written RUNNING at once, with a STARTED history row after the
-- CLAIMED one (what a start of its own would leave).
-- Helper inside worker_claim's transaction: the caller holds a gate of the namespace, the
-- application row and the queue rows where they have limits, the session row and, when it
-- has more than one keyed candidate, their key rows; it checks the application quota, and
-- adds the grants to the application's active_attempts (where kept) and the session's
-- in_flight once per claim. p_limits: the application's quotas (namespace_gate's bits). Sets p_attempt_id to the new attempts.id, or
-- NULL when the task is not granted (no longer READY, deadline passed, queue permits
-- exhausted, token space exhausted). p_actor is the session's history actor.
-- P1, P2: a key admits holders up to its limit (key_limit), each on its own slot: slot 0 is the
-- key row's holder_attempt_id, slots 1.. rows of key_slots, the lowest free one below the
-- limit taken (a slot at or above a lowered limit is never granted again). A grant that leaves
-- the key room promotes its next parked task (key_promote_next), so a key of limit N fills
-- its N slots one claim after another.
-- P6: a key with a rate records each grant's time (key_rate_record); a candidate whose key's
-- rate lets no permit begin yet is not granted but waits, DELAYED, until it does.
-- K7: the token is computed only after the key's row lock is held, as the resource's highest
-- token + 1, raised to the epoch's first token when it is below it (H1, token_epoch); at the
-- epoch's last token (18446744073709551615, unsigned 64-bit max, in the last epoch) the claim
-- is refused, the task stays WAITING (parked) and its history records TOKEN_SPACE_EXHAUSTED
-- once. Never wraps.
-- Errors: INTERNAL when the key's slot has a holder at the grant's write (the reads before it
--   rule that out; the write checks again, and the whole claim rolls back).
-- Locks: tasks row, concurrency_resources row, its key_slots row, then inserts attempts and
-- permits rows; then the key's promoted task (key_promote_next).
CREATE PROCEDURE attempt_grant(IN p_task_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
                               IN p_now DATETIME(6), IN p_actor VARCHAR(200),
                               IN p_limits TINYINT UNSIGNED, IN p_start TINYINT,
                               OUT p_attempt_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_lane VARCHAR(10) DEFAULT NULL;
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_number INT UNSIGNED;
  DECLARE v_q_max INT UNSIGNED;
  DECLARE v_q_active INT UNSIGNED;
  DECLARE v_lease INT UNSIGNED;
  DECLARE v_resource BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_token BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_holder BIGINT UNSIGNED;
  DECLARE v_candidate BIGINT UNSIGNED;
  DECLARE v_limit SMALLINT UNSIGNED DEFAULT 1;
  DECLARE v_slot_holders SMALLINT UNSIGNED DEFAULT 0;
  DECLARE v_slot SMALLINT UNSIGNED DEFAULT 0;
  DECLARE v_new_slot TINYINT DEFAULT 0;
  DECLARE v_written INT DEFAULT 0;
  -- The grant's instant: for a keyed grant, the clock once the key row is held (a claim that
  -- waited for the key must not stamp its grant before what it waited for).
  DECLARE v_at DATETIME(6);
  DECLARE v_rate_permits INT UNSIGNED DEFAULT NULL;
  DECLARE v_rate_next DATETIME(6) DEFAULT NULL;
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE v_ceiling BIGINT UNSIGNED;
  DECLARE v_expires DATETIME(6);
  DECLARE v_q_unfinished_max INT UNSIGNED;

  SET p_attempt_id = NULL, v_at = p_now;
  SELECT lane, namespace_id, application_id, queue_id, concurrency_key, deadline_at,
         attempts_used + 1
    INTO v_lane, v_ns, v_app, v_queue, v_key, v_deadline, v_number
    FROM tasks WHERE id = p_task_id FOR UPDATE;

  IF v_lane = 'READY' THEN
    -- A plain read: where the queue has a limit the claim holds its row, so the count is exact.
    SELECT max_concurrency, active_attempts, lease_seconds, max_unfinished
      INTO v_q_max, v_q_active, v_lease, v_q_unfinished_max
      FROM queues WHERE id = v_queue;
    IF v_deadline IS NOT NULL AND v_deadline <= p_now THEN
      CALL task_leave_lane(p_task_id);
      CALL task_finish(p_task_id, v_app, v_queue, 'DEADLINE_EXCEEDED', NULL, NULL,
                       p_limits | 8 * (v_q_unfinished_max IS NOT NULL));
      CALL history_add(p_task_id, v_ns, NULL, NULL, 'DEADLINE_EXCEEDED', 'WAITING',
                       'DEADLINE_EXCEEDED', 'system:claim', 'deadline passed while waiting');
    ELSEIF v_q_max IS NULL OR v_q_active < v_q_max THEN
      IF v_key <> '' THEN
        CALL token_range(v_floor, v_ceiling);
        SELECT id, token, holder_attempt_id, candidate_task_id, key_limit, slot_holders,
               rate_permits,
               IF(rate_permits IS NULL, NULL, key_rate_next(id, rate_permits, rate_seconds))
          INTO v_resource, v_token, v_holder, v_candidate, v_limit, v_slot_holders,
               v_rate_permits, v_rate_next
          FROM concurrency_resources
         WHERE namespace_id = v_ns AND concurrency_key = v_key FOR UPDATE;
        -- Read again once the key row is held (a statement's clock is its start, before any
        -- wait): a claim read p_now before this lock, and a grant stamped then could precede
        -- the grant of the key it waited for, or a release stamped after it.
        SET v_at = GREATEST(v_at, UTC_TIMESTAMP(6));
      END IF;
      IF v_resource IS NOT NULL AND ((v_holder IS NOT NULL) + v_slot_holders >= v_limit
                                     OR NOT (v_candidate <=> p_task_id)) THEN
        -- The key is full (a policy lowered its limit while this task was its READY
        -- candidate) or this is not its candidate (cannot happen while the parking invariant
        -- holds): park it rather than grant a permit too many. A parked task is no candidate:
        -- the key's next release promotes only a key without one (key_promote_next), and a
        -- parked candidate would wait for it forever.
        UPDATE tasks SET lane = 'BLOCKED' WHERE id = p_task_id;
        UPDATE concurrency_resources
           SET waiting_since = COALESCE(waiting_since, p_now),
               candidate_task_id = IF(candidate_task_id <=> p_task_id, NULL, candidate_task_id)
         WHERE id = v_resource;
      ELSEIF v_resource IS NOT NULL AND v_rate_next > v_at THEN
        -- The key's rate lets no permit begin yet (a policy tightened it since this task was
        -- made READY): it waits for it, DELAYED and still the key's candidate (P6).
        UPDATE tasks SET lane = 'DELAYED', available_at = v_rate_next WHERE id = p_task_id;
        UPDATE concurrency_resources SET waiting_since = COALESCE(waiting_since, p_now)
         WHERE id = v_resource;
      ELSEIF v_resource IS NOT NULL AND v_token >= v_ceiling THEN
        UPDATE tasks SET lane = 'BLOCKED' WHERE id = p_task_id;
        UPDATE concurrency_resources
           SET candidate_task_id = NULL, waiting_since = COALESCE(waiting_since, p_now)
         WHERE id = v_resource;
        IF NOT EXISTS (SELECT 1 FROM task_history
                        WHERE task_id = p_task_id AND event = 'TOKEN_SPACE_EXHAUSTED') THEN
          CALL history_add(p_task_id, v_ns, NULL, NULL, 'TOKEN_SPACE_EXHAUSTED', 'WAITING',
                           'WAITING', 'system:claim', 'token space of the key is exhausted; claim refused');
        END IF;
      ELSE
        IF v_resource IS NOT NULL THEN
          SET v_token = GREATEST(v_token + 1, v_floor);
          IF v_holder IS NOT NULL THEN
            -- Slot 0 is held: the lowest free slot below the limit, or the next one made. Slot
            -- rows are made densely (1, 2, ...), and the key has room, so one of the two is
            -- below the limit. Plain reads: every change of a key's slots holds its key row.
            SELECT MIN(slot) INTO v_slot FROM key_slots
             WHERE resource_id = v_resource AND attempt_id IS NULL AND slot < v_limit;
            IF v_slot IS NULL THEN
              SELECT COALESCE(MAX(slot), 0) + 1 INTO v_slot FROM key_slots
               WHERE resource_id = v_resource;
              SET v_new_slot = 1;
            END IF;
          END IF;
        END IF;
        SET v_expires = v_at + INTERVAL v_lease SECOND;
        IF v_deadline IS NOT NULL AND v_deadline < v_expires THEN
          SET v_expires = v_deadline;
        END IF;
        INSERT INTO attempts (public_id, task_id, namespace_id, application_id, queue_id,
                              session_id, attempt_number, concurrency_token, concurrency_slot,
                              state, lease_expires_at, created_at, started_at)
          VALUES (new_public_id(), p_task_id, v_ns, v_app, v_queue, p_session_id, v_number,
                  v_token, v_slot, IF(p_start, 'RUNNING', 'LEASED'), v_expires, v_at,
                  IF(p_start, v_at, NULL));
        SET p_attempt_id = LAST_INSERT_ID();
        INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, created_at)
          VALUES (p_attempt_id, 'QUEUE', v_queue, NULL, v_expires, v_at);
        IF v_resource IS NOT NULL THEN
          INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, created_at)
            VALUES (p_attempt_id, 'KEY', v_resource, v_resource, v_expires, v_at);
          -- The holder is written only where there is none: the write itself refuses a second
          -- holder of the slot, whatever the reads above concluded.
          IF v_slot = 0 THEN
            UPDATE concurrency_resources
               SET token = v_token, version = version + 1, holder_attempt_id = p_attempt_id,
                   candidate_task_id = NULL, updated_at = v_at
             WHERE id = v_resource AND holder_attempt_id IS NULL;
          ELSE
            IF v_new_slot THEN
              INSERT INTO key_slots (resource_id, slot, attempt_id, updated_at)
                VALUES (v_resource, v_slot, p_attempt_id, v_at);
              SET v_written = 1;
            ELSE
              UPDATE key_slots SET attempt_id = p_attempt_id, updated_at = v_at
               WHERE resource_id = v_resource AND slot = v_slot AND attempt_id IS NULL;
              SET v_written = ROW_COUNT();
            END IF;
            UPDATE concurrency_resources
               SET token = v_token, version = version + 1, slot_holders = slot_holders + 1,
                   candidate_task_id = NULL, updated_at = v_at
             WHERE id = v_resource AND v_written = 1;
          END IF;
          IF ROW_COUNT() <> 1 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: a held key was about to be granted again';
          END IF;
          IF v_rate_permits IS NOT NULL THEN
            CALL key_rate_record(v_resource, v_rate_permits, v_at);
          END IF;
          IF v_limit > 1 THEN
            CALL key_promote_next(v_resource);  -- room left: the next parked task's turn
          END IF;
        END IF;
        UPDATE tasks SET state = IF(p_start, 'RUNNING', 'LEASED'), lane = NULL, attempts_used = v_number,
                         current_attempt_id = p_attempt_id, updated_at = v_at
         WHERE id = p_task_id;
        IF v_q_max IS NOT NULL THEN
          UPDATE queues SET active_attempts = active_attempts + 1 WHERE id = v_queue;
        END IF;
        -- The grant's history written here, stamped at the grant's instant as its attempt is:
        -- one statement where two history_add CALLs were four (sql/README.md, "What a call
        -- costs"). VALUES in each branch rather than one INSERT ... SELECT of both rows: an
        -- insert whose row count is known holds no table AUTO-INC lock to its end, which every
        -- other history insert would wait for (sql/README.md, "Lock order").
        IF p_start THEN
          INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                    from_state, to_state, actor, details, created_at)
            VALUES (p_task_id, v_ns, p_attempt_id, NULLIF(v_token, 0), 'CLAIMED', 'WAITING',
                    'LEASED', p_actor, NULL, v_at),
                   (p_task_id, v_ns, p_attempt_id, NULLIF(v_token, 0), 'STARTED', 'LEASED',
                    'RUNNING', p_actor, NULL, v_at);
        ELSE
          INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                    from_state, to_state, actor, details, created_at)
            VALUES (p_task_id, v_ns, p_attempt_id, NULLIF(v_token, 0), 'CLAIMED', 'WAITING',
                    'LEASED', p_actor, NULL, v_at);
        END IF;
      END IF;
    END IF;
  END IF;
END
