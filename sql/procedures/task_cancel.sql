-- task_cancel: cancel a task before it starts (SPEC 3).
--   WAITING (any lane) -> CANCELLED; a READY key candidate passes its candidacy on.
--   LEASED             -> attempt CANCELLED, permits and key released in this transaction
--                         (K6: the next attempt of the key gets a larger token).
--   anything else      -> STATE_CONFLICT (running, finished or needing review).
-- Result set: {task_id}.
-- Errors: NOT_FOUND, STATE_CONFLICT.
-- Locks, in order: applications row, attempts row (current attempt), tasks row, then
--   attempt_release's / task_leave_lane's rows.
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
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  SELECT id, application_id, queue_id INTO v_task, v_app, v_queue FROM tasks
   WHERE public_id = p_task_public_id AND namespace_id = p_namespace_id;
  IF v_task IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: task not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
  SELECT a.id, a.state, a.concurrency_token, a.session_id
    INTO v_attempt, v_attempt_state, v_token, v_session
    FROM tasks t JOIN attempts a ON a.id = t.current_attempt_id
   WHERE t.id = v_task FOR UPDATE;
  SELECT state INTO v_state FROM tasks WHERE id = v_task FOR UPDATE;
  IF v_state = 'WAITING' THEN
    CALL task_leave_lane(v_task);
    CALL task_finish(v_task, v_app, v_queue, 'CANCELLED', NULL, NULL);
    CALL history_add(v_task, p_namespace_id, NULL, NULL, 'CANCELLED', 'WAITING', 'CANCELLED',
                     p_actor, NULL);
  ELSEIF v_state = 'LEASED' AND v_attempt_state = 'LEASED' THEN
    CALL attempt_release(v_attempt, v_app, v_queue, v_session, 'CANCELLED');
    CALL task_finish(v_task, v_app, v_queue, 'CANCELLED', NULL, NULL);
    CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'CANCELLED', 'LEASED',
                     'CANCELLED', p_actor, 'cancelled before start; permits released');
  ELSE
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: only a task that has not started can be cancelled';
  END IF;
  COMMIT;
  SELECT p_task_public_id AS task_id;
END
