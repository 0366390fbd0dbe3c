-- history_add: append one task_history row. Helper: runs inside the caller's transaction, no
-- transaction control and no handler of its own (errors reach the caller's EXIT HANDLER).
-- Params: task id, namespace id, attempt id (NULL), token (NULL or 0 = none), event, from/to
-- state, actor, details. Locks: none beyond the inserted row.
CREATE PROCEDURE history_add(
  IN p_task_id BIGINT UNSIGNED, IN p_namespace_id BIGINT UNSIGNED, IN p_attempt_id BIGINT UNSIGNED,
  IN p_token BIGINT UNSIGNED, IN p_event VARCHAR(40), IN p_from VARCHAR(20), IN p_to VARCHAR(20),
  IN p_actor VARCHAR(200), IN p_details VARCHAR(1000))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                            from_state, to_state, actor, details, created_at)
  VALUES (p_task_id, p_namespace_id, p_attempt_id, NULLIF(p_token, 0), p_event, p_from, p_to,
          p_actor, p_details, UTC_TIMESTAMP(6));
END
