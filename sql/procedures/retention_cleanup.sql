-- retention_cleanup: delete one batch of what a namespace's retention window has passed (R1,
-- R4): finished tasks (SUCCEEDED, FAILED, CANCELLED, DEADLINE_EXCEEDED) that finished longer
-- ago than the window, each with its attempts, history and Idempotency-Key record (R2: the key
-- then creates a new task); schedule fire records older than the window; worker sessions that
-- hold nothing and were last seen before it. Whatever the window, a task is kept for 5 s
-- after it finished (the call that finished it reads its answer after its commit, L3), and a
-- session or fire record for an hour (a live worker calls every 30 s at least; the scheduler
-- never goes back an hour to fire again). A task that needs review or is unfinished is
-- never deleted. One short transaction of at most p_batch rows of each kind, found through
-- indexes (ix_tasks_ns_finished, the fires' primary key per schedule, ix_worker_sessions_seen)
-- and deleted by key, children after their task's attempts and before nothing that refers to
-- them. The shell calls it until a batch deletes less than a full one (server/cleanup.py).
-- Params: namespace; batch size.
-- Result set: {tasks, attempts, task_history, idempotency_records, schedule_fires,
--   worker_sessions, more}: rows deleted, and 1 when a kind filled its batch (call again).
-- Errors: NOT_FOUND (no such namespace).
-- Locks: the batch's attempts rows, then their tasks rows (lock order 3), then the sessions
--   rows (5), then history, fire and Idempotency-Key rows. Final tasks and attempts never
--   change again, so only a reader or a refused late report meets them; a session that
--   claims meanwhile is re-checked where it is deleted and kept.
CREATE PROCEDURE retention_cleanup(IN p_namespace_id BIGINT UNSIGNED, IN p_batch INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_cutoff DATETIME(6) DEFAULT NULL;
  DECLARE v_unseen DATETIME(6);
  DECLARE v_done DATETIME(6);
  DECLARE v_tasks, v_attempts, v_history, v_records, v_fires, v_sessions INT UNSIGNED DEFAULT 0;
  DECLARE v_found_tasks, v_found_fires, v_found_sessions INT UNSIGNED DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  -- Made before the transaction; MEMORY, so filling them writes no undo.
  CREATE TEMPORARY TABLE IF NOT EXISTS cleanup_tasks_mem (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL
  ) ENGINE = MEMORY;
  CREATE TEMPORARY TABLE IF NOT EXISTS cleanup_fires_mem (
    schedule_id BIGINT UNSIGNED NOT NULL,
    fire_time DATETIME(6) NOT NULL,
    PRIMARY KEY (schedule_id, fire_time)
  ) ENGINE = MEMORY;
  CREATE TEMPORARY TABLE IF NOT EXISTS cleanup_sessions_mem (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY
  ) ENGINE = MEMORY;
  DELETE FROM cleanup_tasks_mem;
  DELETE FROM cleanup_fires_mem;
  DELETE FROM cleanup_sessions_mem;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT UTC_TIMESTAMP(6) - INTERVAL retention_seconds SECOND INTO v_cutoff
    FROM namespaces WHERE id = p_namespace_id;
  IF v_cutoff IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
  SET v_unseen = LEAST(v_cutoff, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR);
  SET v_done = LEAST(v_cutoff, UTC_TIMESTAMP(6) - INTERVAL 5 SECOND);

  -- Plain reads (READ COMMITTED): the rows are locked where they are deleted.
  INSERT INTO cleanup_tasks_mem (id, idempotency_key)
  SELECT id, idempotency_key FROM tasks FORCE INDEX (ix_tasks_ns_finished)
   WHERE namespace_id = p_namespace_id
     AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEADLINE_EXCEEDED')
     AND finished_at < v_done
   LIMIT p_batch;
  SET v_found_tasks = ROW_COUNT();
  INSERT INTO cleanup_fires_mem (schedule_id, fire_time)
  SELECT f.schedule_id, f.fire_time FROM schedules s FORCE INDEX (uq_schedules_name)
    STRAIGHT_JOIN schedule_fires f FORCE INDEX (PRIMARY)
      ON f.schedule_id = s.id AND f.fire_time < v_unseen
   WHERE s.namespace_id = p_namespace_id
   LIMIT p_batch;
  SET v_found_fires = ROW_COUNT();
  INSERT INTO cleanup_sessions_mem (id)
  SELECT id FROM worker_sessions FORCE INDEX (ix_worker_sessions_seen)
   WHERE namespace_id = p_namespace_id AND last_seen_at < v_unseen AND in_flight = 0
   LIMIT p_batch;
  SET v_found_sessions = ROW_COUNT();

  IF v_found_tasks > 0 THEN
    DELETE a FROM cleanup_tasks_mem m
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_number) ON a.task_id = m.id;
    SET v_attempts = ROW_COUNT();
    DELETE t FROM cleanup_tasks_mem m
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = m.id;
    SET v_tasks = ROW_COUNT();
  END IF;
  IF v_found_sessions > 0 THEN
    -- Re-checked under the row's lock: a worker that came back meanwhile keeps its session.
    DELETE s FROM cleanup_sessions_mem m
      STRAIGHT_JOIN worker_sessions s FORCE INDEX (PRIMARY) ON s.id = m.id
     WHERE s.in_flight = 0 AND s.last_seen_at < v_unseen;
    SET v_sessions = ROW_COUNT();
    DELETE q FROM cleanup_sessions_mem m
      STRAIGHT_JOIN worker_session_queues q FORCE INDEX (PRIMARY) ON q.session_id = m.id
     WHERE NOT EXISTS (SELECT 1 FROM worker_sessions s WHERE s.id = m.id);
  END IF;
  IF v_found_tasks > 0 THEN
    DELETE h FROM cleanup_tasks_mem m
      STRAIGHT_JOIN task_history h FORCE INDEX (ix_task_history_task) ON h.task_id = m.id;
    SET v_history = ROW_COUNT();
    DELETE r FROM cleanup_tasks_mem m
      STRAIGHT_JOIN idempotency_records r FORCE INDEX (PRIMARY)
        ON r.namespace_id = p_namespace_id AND r.idempotency_key = m.idempotency_key
       AND r.task_id = m.id;
    SET v_records = ROW_COUNT();
  END IF;
  IF v_found_fires > 0 THEN
    DELETE f FROM cleanup_fires_mem m
      STRAIGHT_JOIN schedule_fires f FORCE INDEX (PRIMARY)
        ON f.schedule_id = m.schedule_id AND f.fire_time = m.fire_time;
    SET v_fires = ROW_COUNT();
  END IF;
  IF v_found_tasks < p_batch AND v_found_fires < p_batch AND v_found_sessions < p_batch THEN
    UPDATE namespaces SET cleaned_at = UTC_TIMESTAMP(6) WHERE id = p_namespace_id;
  END IF;
  COMMIT;
  SELECT v_tasks AS tasks, v_attempts AS attempts, v_history AS task_history,
         v_records AS idempotency_records, v_fires AS schedule_fires,
         v_sessions AS worker_sessions,
         v_found_tasks >= p_batch OR v_found_fires >= p_batch OR v_found_sessions >= p_batch
           AS more;
END
