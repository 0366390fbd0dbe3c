-- task_finish: move a task to a final state (SUCCEEDED, FAILED, CANCELLED, DEADLINE_EXCEEDED)
-- and give back its unfinished-quota slots where they are counted. Helper inside the caller's
-- transaction; the caller holds the task row (and the application and queue rows where they
-- have limits), has already released any attempt, and passes the task's application and
-- queue and the limits (attempt_release's bits: 2 and 8 keep unfinished_tasks).
CREATE PROCEDURE task_finish(IN p_task_id BIGINT UNSIGNED, IN p_app BIGINT UNSIGNED,
                             IN p_queue BIGINT UNSIGNED, IN p_state VARCHAR(20),
                             IN p_result MEDIUMTEXT, IN p_error MEDIUMTEXT,
                             IN p_limits TINYINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  UPDATE tasks SET state = p_state, lane = NULL, result = COALESCE(p_result, result),
                   error = COALESCE(p_error, error), updated_at = v_now, finished_at = v_now
   WHERE id = p_task_id;
  IF p_limits & 8 THEN
    UPDATE queues SET unfinished_tasks = unfinished_tasks - 1 WHERE id = p_queue;
  END IF;
  IF p_limits & 2 THEN
    UPDATE applications SET unfinished_tasks = unfinished_tasks - 1 WHERE id = p_app;
  END IF;
END
