-- task_cancel: cancel a task before it starts (SPEC 3).
--   WAITING (any lane) -> CANCELLED; a READY key candidate passes its candidacy on.
--   LEASED             -> attempt CANCELLED, permits and key released in this transaction
--                         (K6: the next attempt of the key gets a larger token).
--   anything else      -> STATE_CONFLICT (running, finished or needing review).
-- A cancelled task's cancel_reason is CANCELLED_BY_USER.
-- Result set: {task_id}.
-- Errors: NOT_FOUND, STATE_CONFLICT.
-- Locks, in order: a gate of the namespace and, under quotas, the application row
--   (namespace_gate), the current attempts row, then task_lock_waiting's (the key row first
--   for a parked task), then attempt_release's / task_leave_lane's rows.
-- A claim that gives the task a new attempt between the read of its current attempt and the
-- task's lock is answered as a deadlock (1213): the shell retries the call whole.
CREATE PROCEDURE task_cancel(IN p_namespace_id BIGINT UNSIGNED, IN p_task_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                             IN p_actor VARCHAR(200))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(20);
  DECLARE v_attempt BIGINT UNSIGNED;
  DECLARE v_attempt_state VARCHAR(20);
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_current BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  SELECT id, application_id, queue_id INTO v_task, v_app, v_queue FROM tasks
   WHERE public_id = p_task_public_id AND namespace_id = p_namespace_id;
  IF v_task IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: task not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
  -- The current attempt first (attempts before tasks, as a result and a recovery lock them):
  -- found by a plain read, locked by key.
  SELECT current_attempt_id INTO v_attempt FROM tasks WHERE id = v_task;
  IF v_attempt IS NOT NULL THEN
    SELECT state, concurrency_token, session_id INTO v_attempt_state, v_token, v_session
      FROM attempts WHERE id = v_attempt FOR UPDATE;
  END IF;
  CALL task_lock_waiting(v_task, v_limits, v_state, v_limits);
  SELECT current_attempt_id INTO v_current FROM tasks WHERE id = v_task;
  IF NOT (v_current <=> v_attempt) THEN
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
      MESSAGE_TEXT = 'the task was claimed while it was being cancelled; retry';
  END IF;
  IF v_state = 'WAITING' THEN
    CALL task_leave_lane(v_task);
    CALL task_finish(v_task, v_app, v_queue, 'CANCELLED', NULL, NULL, v_limits);
    CALL history_add(v_task, p_namespace_id, NULL, NULL, 'CANCELLED', 'WAITING', 'CANCELLED',
                     p_actor, NULL);
  ELSEIF v_state = 'LEASED' AND v_attempt_state = 'LEASED' THEN
    CALL attempt_release(v_attempt, v_app, v_queue, v_session, 'CANCELLED', v_limits,
                         UTC_TIMESTAMP(6), v_token);
    CALL task_finish(v_task, v_app, v_queue, 'CANCELLED', NULL, NULL, v_limits);
    CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'CANCELLED', 'LEASED',
                     'CANCELLED', p_actor, 'cancelled before start; permits released');
  ELSE
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: only a task that has not started can be cancelled';
  END IF;
  UPDATE tasks SET cancel_reason = 'CANCELLED_BY_USER' WHERE id = v_task;
  COMMIT;
  SELECT p_task_public_id AS task_id;
END
