-- attempt_recover: lease recovery of one attempt (SPEC 3). Idempotent: an attempt that is no
-- longer LEASED/RUNNING, or whose lease has not expired, is left alone.
-- Helper inside the caller's transaction; the caller holds a gate of the attempt's namespace
-- and passes the application's quotas as it read them (namespace_gate, which locked the
-- application row where it has one).
--   expired LEASED  -> attempt EXPIRED, task back to WAITING (or DEADLINE_EXCEEDED if past it);
--                      once max_attempts of its attempts have expired before start, FAILED
--                      (L3: a task no worker ever starts, say one whose answer cannot reach
--                      it, is dispatched a bounded number of times and ends where people look)
--   expired RUNNING -> attempt UNKNOWN, task NEEDS_REVIEW (the effect is unknown)
-- Permits, including the key, are released in the same transaction (K6).
-- Locks: attempts and tasks rows, the queue row where the queue has a limit (queue_limits),
-- then attempt_release's order and, back to WAITING, task_enter_lane's key row.
CREATE PROCEDURE attempt_recover(IN p_attempt_id BIGINT UNSIGNED, IN p_actor VARCHAR(200),
                                 IN p_app_limits TINYINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_state VARCHAR(20);
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED;
  DECLARE v_max_attempts INT UNSIGNED;
  DECLARE v_unstarted INT UNSIGNED;
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_limits TINYINT UNSIGNED;

  SELECT a.task_id, a.state, a.namespace_id, a.concurrency_token, t.deadline_at,
         a.application_id, a.queue_id, a.session_id, t.max_attempts
    INTO v_task, v_state, v_ns, v_token, v_deadline, v_app, v_queue, v_session, v_max_attempts
    FROM attempts a JOIN tasks t ON t.id = a.task_id
   WHERE a.id = p_attempt_id AND a.state IN ('LEASED', 'RUNNING') AND a.lease_expires_at <= v_now
     FOR UPDATE;
  IF v_task IS NOT NULL THEN
    CALL queue_limits(v_queue, p_app_limits, v_limits);
    IF v_state = 'LEASED' THEN
      -- Released at the clock read now, after the row locks: v_now was read before them (the
      -- lease's test), and a release must not be stamped before a change it waited for.
      CALL attempt_release(p_attempt_id, v_app, v_queue, v_session, 'EXPIRED', v_limits,
                           UTC_TIMESTAMP(6), v_token);
      -- Counted with this attempt, EXPIRED now; uq_attempts_number reads only the task's.
      SELECT COUNT(*) INTO v_unstarted FROM attempts WHERE task_id = v_task AND state = 'EXPIRED';
      IF v_deadline IS NOT NULL AND v_deadline <= v_now THEN
        CALL task_finish(v_task, v_app, v_queue, 'DEADLINE_EXCEEDED', NULL, NULL, v_limits);
        CALL history_add(v_task, v_ns, p_attempt_id, v_token, 'LEASE_EXPIRED', 'LEASED',
                         'DEADLINE_EXCEEDED', p_actor, 'lease expired before start; deadline passed');
      ELSEIF v_unstarted >= v_max_attempts THEN
        CALL task_finish(v_task, v_app, v_queue, 'FAILED', NULL,
                         JSON_OBJECT('code', 'NEVER_STARTED', 'message',
                                     CONCAT('leased ', v_unstarted, ' times and never started')), v_limits);
        CALL history_add(v_task, v_ns, p_attempt_id, v_token, 'DISPATCH_LIMIT', 'LEASED', 'FAILED',
                         p_actor, CONCAT('lease expired before start; ', v_unstarted,
                                         ' attempts never started'));
      ELSE
        UPDATE tasks SET state = 'WAITING', available_at = v_now, updated_at = v_now WHERE id = v_task;
        CALL task_enter_lane(v_task);
        CALL history_add(v_task, v_ns, p_attempt_id, v_token, 'LEASE_EXPIRED', 'LEASED', 'WAITING',
                         p_actor, 'lease expired before start');
      END IF;
    ELSE
      CALL attempt_release(p_attempt_id, v_app, v_queue, v_session, 'UNKNOWN', v_limits,
                           UTC_TIMESTAMP(6), v_token);
      UPDATE tasks SET state = 'NEEDS_REVIEW', lane = NULL, updated_at = v_now WHERE id = v_task;
      CALL history_add(v_task, v_ns, p_attempt_id, v_token, 'LEASE_EXPIRED', 'RUNNING',
                       'NEEDS_REVIEW', p_actor, 'lease expired while running; outcome unknown');
    END IF;
  END IF;
END
