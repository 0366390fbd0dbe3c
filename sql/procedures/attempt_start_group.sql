-- attempt_start_group: start the LEASED attempts listed in start_group_mem (attempt_start_tables):
-- each attempt and its task RUNNING, one STARTED history row each, in seq order. The group of
-- attempt_start_many, and the grants a claim made one by one and starts (session_start_granted).
-- Helper inside the caller's transaction: no transaction control, no handler. The caller
-- holds the rows already (attempt_start_many's locking read; a claim's own grants).
-- Params: namespace, the session's public id (the history's actor), the time to stamp.
CREATE PROCEDURE attempt_start_group(IN p_namespace_id BIGINT UNSIGNED,
                                     IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                     IN p_now DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  -- From the group's rows to the tables (STRAIGHT_JOIN): a temporary table has no statistics.
  UPDATE start_group_mem f STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = f.attempt_id
    STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
     SET a.state = 'RUNNING', a.started_at = p_now, t.state = 'RUNNING', t.updated_at = p_now;
  INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                            from_state, to_state, actor, details, created_at)
  SELECT task_id, p_namespace_id, attempt_id, NULLIF(token, 0), 'STARTED', 'LEASED', 'RUNNING',
         CONCAT('session:', p_session_public_id), NULL, p_now
    FROM start_group_mem ORDER BY seq;
END
