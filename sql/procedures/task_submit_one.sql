-- task_submit_one: the body of task_submit, for task_submit and task_submit_many. Helper inside
-- the caller's transaction: no transaction control, no handler; errors are SIGNALled to the
-- caller. Sets p_task_id (tasks.id) and p_created (1 first acceptance, 0 replay).
-- Params: namespace, queue (internal id, already scope-checked by the shell), Idempotency-Key,
--   fingerprint (SHA-256 of the normalised request), task fields, deadline in seconds (NULL =
--   none), actor, the schedule origin (NULLs for API submissions), and whether the
--   application has an unfinished-task quota (the caller's gate says, namespace_gate).
-- Errors: NOT_FOUND (queue not in namespace), IDEMPOTENCY_CONFLICT (same key, other content),
--   QUOTA_EXCEEDED (application or queue unfinished quota).
-- Locks, in order (the caller holds a gate of the namespace): the applications row only when
--   the application has max_unfinished, the queues row only when the queue has max_unfinished
--   (each counter is kept exactly where its limit is set), the concurrency_resources row
--   (keyed), then the new task and idempotency rows. Without limits no row shared by the
--   tenant's tasks is locked.
-- Two concurrent submissions with one Idempotency-Key both find no record; the second's insert
-- of it waits for the first and then fails as a duplicate, which the caller turns into a retry
-- of the whole call, and the retry answers the first one's task (K1).
-- A busy key is not an error (K4): the task is parked as BLOCKED, consumes no attempt and
-- counts toward the unfinished quotas. Unless the submission says if_busy 'skip' (P5): then a
-- key already busy (an attempt holds it, or a task of it waits) accepts the task ended at
-- once, CANCELLED with reason KEY_BUSY, counted in no quota. It is decided under the key row's
-- lock, which every submission of the key takes, after the row is made for a new key: of two
-- submissions of an idle key, the second sees the first's task. With 'replace', the key's
-- tasks of the same handler that wait (any lane, so none holds a permit) are cancelled first,
-- reason REPLACED, each naming the new task, which then waits as usual; a task another
-- transaction holds at that moment (a claim taking it) is left to run. Their queues' rows,
-- where unfinished tasks are counted, were locked by the caller before the key (p_locked:
-- queues_lock's list); a victim in a limited queue not in it joined the key since, and the
-- call is answered as a deadlock, retried whole. if_busy changes nothing for an unkeyed task.
-- A debounced submission (p_debounce_delay_ms) continues the burst of the tasks it replaces
-- (none but with 'replace' and a key): it becomes available p_debounce_delay_ms from now, but
-- no later than p_debounce_max_wait_ms after the burst began (the earliest of the replaced
-- tasks' bursts, or now), waiting until then in the DELAYED lane, from which the due sweep
-- lets it in by the key's rule. It replaces the key's DELAYED and parked tasks, never a READY
-- one: a READY task's burst has ended (its time came, and it runs), and a claim may hold it
-- while it waits for this key row, a cycle that SKIP LOCKED does not break on MariaDB (its
-- request waits and is checked for deadlock like any other; "Lock order" in sql/README.md).
-- A plain 'replace' does replace a READY task, and so may meet that cycle: it is then rolled
-- back and retried whole.
CREATE PROCEDURE task_submit_one(
  IN p_namespace_id BIGINT UNSIGNED, IN p_queue_id BIGINT UNSIGNED,
  IN p_idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin, IN p_fingerprint CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_handler VARCHAR(200), IN p_handler_version VARCHAR(64), IN p_payload_version VARCHAR(64),
  IN p_payload MEDIUMTEXT, IN p_business_key VARCHAR(191), IN p_concurrency_key VARCHAR(191),
  IN p_priority TINYINT UNSIGNED, IN p_max_attempts INT UNSIGNED, IN p_deadline_seconds INT UNSIGNED,
  IN p_if_busy VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_debounce_delay_ms INT UNSIGNED, IN p_debounce_max_wait_ms INT UNSIGNED,
  IN p_actor VARCHAR(200), IN p_schedule_id BIGINT UNSIGNED, IN p_schedule_version INT UNSIGNED,
  IN p_fire_time DATETIME(6), IN p_unfinished_limited TINYINT, IN p_locked TEXT,
  OUT p_task_id BIGINT UNSIGNED, OUT p_created TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_existing_fp CHAR(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL;
  DECLARE v_existing_task BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app_max INT UNSIGNED;
  DECLARE v_app_unfinished INT UNSIGNED;
  DECLARE v_q_max INT UNSIGNED;
  DECLARE v_q_unfinished INT UNSIGNED;
  DECLARE v_q_attempts INT UNSIGNED;
  DECLARE v_q_state VARCHAR(10);
  DECLARE v_lane VARCHAR(10);
  DECLARE v_resource BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_holders INT;
  DECLARE v_room TINYINT;
  DECLARE v_rate_next DATETIME(6);
  DECLARE v_until DATETIME(6);
  DECLARE v_candidate BIGINT UNSIGNED;
  DECLARE v_waiting DATETIME(6);
  DECLARE v_busy TINYINT DEFAULT 0;
  DECLARE v_replaced MEDIUMTEXT DEFAULT '[]';
  DECLARE v_victims MEDIUMTEXT;
  DECLARE v_at INT DEFAULT 0;
  DECLARE v_victim BIGINT UNSIGNED;
  DECLARE v_victim_queue BIGINT UNSIGNED;
  DECLARE v_victim_lane VARCHAR(10);
  DECLARE v_victim_limits TINYINT UNSIGNED;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_burst DATETIME(6) DEFAULT NULL;
  DECLARE v_victim_burst DATETIME(6);
  DECLARE v_available DATETIME(6);
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_now DATETIME(6);

  SET p_task_id = NULL, p_created = 0;
  -- The queue and the Idempotency-Key's record, one plain read (a statement fewer than a read
  -- of each). The queue's limits never change, and its state changes only under every gate of
  -- the namespace, so neither changes while the caller holds one. An unknown queue is no row:
  -- NOT_FOUND before anything the key's record says.
  SELECT q.application_id, q.max_unfinished, q.max_attempts, q.state, i.fingerprint, i.task_id
    INTO v_app, v_q_max, v_q_attempts, v_q_state, v_existing_fp, v_existing_task
    FROM queues q FORCE INDEX (PRIMARY)
    LEFT JOIN idempotency_records i FORCE INDEX (PRIMARY)
      ON i.namespace_id = p_namespace_id AND i.idempotency_key = p_idempotency_key
   WHERE q.id = p_queue_id AND q.namespace_id = p_namespace_id;
  IF v_app IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
  END IF;

  IF v_existing_task IS NOT NULL THEN
    IF v_existing_fp <> p_fingerprint THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
        'IDEMPOTENCY_CONFLICT: Idempotency-Key was already used with different content';
    END IF;
    SET p_task_id = v_existing_task, p_created = 0;
  ELSE
    IF p_unfinished_limited THEN
      SELECT max_unfinished, unfinished_tasks INTO v_app_max, v_app_unfinished
        FROM applications WHERE id = v_app FOR UPDATE;
      IF v_app_max IS NOT NULL AND v_app_unfinished >= v_app_max THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUOTA_EXCEEDED: application unfinished-task quota reached';
      END IF;
    END IF;
    IF v_q_max IS NOT NULL THEN
      SELECT unfinished_tasks INTO v_q_unfinished FROM queues WHERE id = p_queue_id FOR UPDATE;
      IF v_q_unfinished >= v_q_max THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUOTA_EXCEEDED: queue unfinished-task quota reached';
      END IF;
    END IF;
    -- The clock is read after the locks: a call that waited must not stamp times earlier
    -- than the change it waited for.
    SET v_now = UTC_TIMESTAMP(6);

    IF p_concurrency_key <> '' AND p_if_busy IN ('skip', 'replace') THEN
      CALL key_row_lock(p_namespace_id, p_concurrency_key, v_resource, v_holders, v_room,
                        v_candidate, v_waiting, v_rate_next);
    END IF;
    IF v_resource IS NOT NULL AND p_if_busy = 'skip' THEN
      -- Busy: held, or a task of the key waits in any lane (ix_tasks_key_lane: the first
      -- entry of the key with a lane ends the read).
      SET v_busy = v_holders > 0 OR EXISTS (
        SELECT 1 FROM tasks FORCE INDEX (ix_tasks_key_lane)
         WHERE namespace_id = p_namespace_id AND concurrency_key = p_concurrency_key
           AND lane IS NOT NULL);
    END IF;

    IF v_resource IS NOT NULL AND p_if_busy = 'replace' THEN
      -- The key's waiting tasks of this handler, read once through the lanes of
      -- ix_tasks_key_lane (never the key's finished tasks, however many the retention keeps):
      -- none can join while the key row is held. Each is then locked without waiting: one
      -- locked elsewhere is being changed (a claim takes it, a cancel or the sweeper ends it)
      -- and is left alone.
      SELECT COALESCE(JSON_ARRAYAGG(id), '[]') INTO v_victims
        FROM tasks FORCE INDEX (ix_tasks_key_lane)
       WHERE namespace_id = p_namespace_id AND concurrency_key = p_concurrency_key
         AND lane IS NOT NULL AND handler = p_handler
         AND (COALESCE(p_debounce_delay_ms, 0) = 0 OR lane <> 'READY');
      victims: WHILE v_at < JSON_LENGTH(v_victims) DO
        SET v_victim = JSON_EXTRACT(v_victims, CONCAT('$[', v_at, ']'));
        SET v_at = v_at + 1, v_victim_lane = NULL;
        SELECT queue_id, COALESCE(burst_started_at, created_at)
          INTO v_victim_queue, v_victim_burst
          FROM tasks WHERE id = v_victim;
        SELECT 8 * (max_unfinished IS NOT NULL) INTO v_victim_limits
          FROM queues WHERE id = v_victim_queue;
        IF v_victim_limits > 0 AND FIND_IN_SET(v_victim_queue, p_locked) = 0 THEN
          SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
            MESSAGE_TEXT = 'a task of another queue joined the key while it was replaced; retry';
        END IF;
        SELECT lane INTO v_victim_lane FROM tasks WHERE id = v_victim FOR UPDATE SKIP LOCKED;
        IF v_victim_lane IS NOT NULL THEN
          CALL task_leave_lane(v_victim);
          CALL task_finish(v_victim, v_app, v_victim_queue, 'CANCELLED', NULL, NULL,
                           v_victim_limits | p_unfinished_limited);
          UPDATE tasks SET cancel_reason = 'REPLACED' WHERE id = v_victim;
          SET v_replaced = JSON_ARRAY_APPEND(v_replaced, '$', v_victim);
          SET v_burst = LEAST(COALESCE(v_burst, v_victim_burst), v_victim_burst);
        END IF;
      END WHILE victims;
    END IF;

    -- The lane is decided before the insert (task_enter_lane's rules for a task available
    -- now), so the new row's lane indexes are written once rather than inserted and updated.
    SET v_lane = 'READY', v_available = v_now;
    IF p_debounce_delay_ms > 0 THEN
      SET v_burst = COALESCE(v_burst, v_now);
      SET v_available = LEAST(v_now + INTERVAL p_debounce_delay_ms * 1000 MICROSECOND,
                              v_burst + INTERVAL p_debounce_max_wait_ms * 1000 MICROSECOND);
    END IF;
    IF v_busy THEN
      SET v_lane = NULL;
    ELSEIF v_available > v_now THEN
      SET v_lane = 'DELAYED';  -- the due sweep enters it by the key's rule (task_enter_lane)
    ELSEIF p_concurrency_key <> '' THEN
      CALL key_lane(p_namespace_id, p_concurrency_key, v_q_state, 0, v_resource, v_lane, v_until);
      SET v_available = COALESCE(v_until, v_available);
    END IF;

    INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, idempotency_key,
                       handler, handler_version, payload_version, payload, payload_bytes,
                       business_key, concurrency_key, priority, state, lane, max_attempts,
                       available_at, deadline_at, schedule_id, schedule_version, fire_time,
                       created_at, updated_at, finished_at, cancel_reason, burst_started_at)
    VALUES (new_public_id(), p_namespace_id, v_app, p_queue_id, p_idempotency_key,
            p_handler, p_handler_version, p_payload_version, p_payload, LENGTH(p_payload),
            COALESCE(p_business_key, ''), COALESCE(p_concurrency_key, ''), p_priority,
            IF(v_busy, 'CANCELLED', 'WAITING'), v_lane, COALESCE(p_max_attempts, v_q_attempts),
            v_available,
            IF(p_deadline_seconds IS NULL, NULL, v_now + INTERVAL p_deadline_seconds SECOND),
            p_schedule_id, p_schedule_version, p_fire_time, v_now, v_now,
            IF(v_busy, v_now, NULL), IF(v_busy, 'KEY_BUSY', NULL),
            IF(p_debounce_delay_ms > 0, v_burst, NULL));
    SET v_task = LAST_INSERT_ID();
    INSERT INTO idempotency_records (namespace_id, idempotency_key, fingerprint, task_id, created_at)
      VALUES (p_namespace_id, p_idempotency_key, p_fingerprint, v_task, v_now);
    IF p_unfinished_limited AND NOT v_busy THEN
      UPDATE applications SET unfinished_tasks = unfinished_tasks + 1 WHERE id = v_app;
    END IF;
    IF v_q_max IS NOT NULL AND NOT v_busy THEN
      UPDATE queues SET unfinished_tasks = unfinished_tasks + 1 WHERE id = p_queue_id;
    END IF;
    IF (v_lane = 'READY' OR v_until IS NOT NULL) AND v_resource IS NOT NULL THEN
      UPDATE concurrency_resources SET candidate_task_id = v_task WHERE id = v_resource;
    END IF;
    -- The replaced tasks name their replacement (known now) in their row and history.
    WHILE v_i < JSON_LENGTH(v_replaced) DO
      SET v_victim = JSON_EXTRACT(v_replaced, CONCAT('$[', v_i, ']'));
      UPDATE tasks SET replaced_by_task_id = v_task WHERE id = v_victim;
      CALL history_add(v_victim, p_namespace_id, NULL, NULL, 'CANCELLED', 'WAITING', 'CANCELLED',
                       p_actor, CONCAT('if_busy=replace: replaced by task ',
                                       (SELECT public_id FROM tasks WHERE id = v_task)));
      SET v_i = v_i + 1;
    END WHILE;
    IF v_busy THEN
      CALL history_add(v_task, p_namespace_id, NULL, NULL, 'SUBMITTED', NULL, 'CANCELLED', p_actor,
                       'if_busy=skip: the key was busy (KEY_BUSY)');
    ELSE
      -- history_add's row, written here and stamped as the task is: a CALL frame costs about
      -- what a statement does (sql/README.md, "What a call costs").
      INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                from_state, to_state, actor, details, created_at)
        VALUES (v_task, p_namespace_id, NULL, NULL, 'SUBMITTED', NULL, 'WAITING', p_actor,
                CONCAT('lane=', v_lane), v_now);
    END IF;
    SET p_task_id = v_task, p_created = 1;
  END IF;
END
