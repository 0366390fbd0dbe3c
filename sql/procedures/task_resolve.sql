-- task_resolve: settle a NEEDS_REVIEW task (SPEC 3): to SUCCEEDED or FAILED (final), or back to
-- WAITING for another attempt (max_attempts is raised to allow exactly one more started
-- attempt if it was used up). The unknown attempt and its history stay as they are.
-- Result set: {task_id}.
-- Errors: NOT_FOUND, STATE_CONFLICT (task not in NEEDS_REVIEW), INVALID_ARGUMENT (target).
-- Locks, in order: a gate of the namespace and, under quotas, the application row
--   (namespace_gate), the tasks row, the queues row where it has a limit, then
--   task_enter_lane's key row.
CREATE PROCEDURE task_resolve(IN p_namespace_id BIGINT UNSIGNED, IN p_task_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_to_state VARCHAR(20), IN p_actor VARCHAR(200),
                              IN p_note VARCHAR(1000))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(20);
  DECLARE v_started INT UNSIGNED;
  DECLARE v_now DATETIME(6);
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  IF p_to_state NOT IN ('SUCCEEDED', 'FAILED', 'WAITING') THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INVALID_ARGUMENT: state must be SUCCEEDED, FAILED or WAITING';
  END IF;
  SELECT id, application_id, queue_id INTO v_task, v_app, v_queue FROM tasks
   WHERE public_id = p_task_public_id AND namespace_id = p_namespace_id;
  IF v_task IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: task not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
  SELECT state INTO v_state FROM tasks WHERE id = v_task FOR UPDATE;
  CALL queue_limits(v_queue, v_limits, v_limits);
  -- The clock is read after the locks: a call that waited must not stamp times earlier than
  -- the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF v_state <> 'NEEDS_REVIEW' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: only a NEEDS_REVIEW task can be resolved';
  END IF;
  IF p_to_state = 'WAITING' THEN
    SELECT COUNT(*) INTO v_started FROM attempts WHERE task_id = v_task AND started_at IS NOT NULL;
    UPDATE tasks SET state = 'WAITING', available_at = v_now,
                     max_attempts = GREATEST(max_attempts, v_started + 1), updated_at = v_now
     WHERE id = v_task;
    CALL task_enter_lane(v_task);
  ELSE
    CALL task_finish(v_task, v_app, v_queue, p_to_state, NULL, NULL, v_limits);
  END IF;
  CALL history_add(v_task, p_namespace_id, NULL, NULL, 'RESOLVED', 'NEEDS_REVIEW', p_to_state,
                   p_actor, p_note);
  COMMIT;
  SELECT p_task_public_id AS task_id;
END
