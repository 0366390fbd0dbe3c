-- task_finish: move a task to a final state (SUCCEEDED, FAILED, CANCELLED, DEADLINE_EXCEEDED)
-- and give back its unfinished-quota slots. Helper inside the caller's transaction; the caller
-- holds the application row and the task row, has already released any attempt, and passes the
-- task's application and queue (it has read them already).
CREATE PROCEDURE task_finish(IN p_task_id BIGINT UNSIGNED, IN p_app BIGINT UNSIGNED,
                             IN p_queue BIGINT UNSIGNED, IN p_state VARCHAR(20),
                             IN p_result MEDIUMTEXT, IN p_error MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  UPDATE tasks SET state = p_state, lane = NULL, result = COALESCE(p_result, result),
                   error = COALESCE(p_error, error), updated_at = v_now, finished_at = v_now
   WHERE id = p_task_id;
  UPDATE queues SET unfinished_tasks = unfinished_tasks - 1 WHERE id = p_queue;
  UPDATE applications SET unfinished_tasks = unfinished_tasks - 1 WHERE id = p_app;
END
