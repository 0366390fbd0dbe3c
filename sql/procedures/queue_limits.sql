-- queue_limits: the limits a change of one task counts against, and the queue's row locked
-- where it has one. Helper inside the caller's transaction; the caller holds a gate of the
-- namespace (namespace_gate, whose application bits it passes) and the task's attempt and
-- task rows, and calls this before any session or key row (the lock order).
-- Out: p_app_limits with the queue's bits added (4 max_concurrency, 8 max_unfinished), for
--   attempt_release and task_finish. A queue's limits are set when it is made and never
--   change, so the plain read is exact.
-- Locks: the queues row, only when the queue has a limit.
CREATE PROCEDURE queue_limits(IN p_queue_id BIGINT UNSIGNED, IN p_app_limits TINYINT UNSIGNED,
                              OUT p_limits TINYINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue_limits TINYINT UNSIGNED DEFAULT 0;
  DECLARE v_ignored BIGINT UNSIGNED;
  SELECT 4 * (max_concurrency IS NOT NULL) + 8 * (max_unfinished IS NOT NULL) INTO v_queue_limits
    FROM queues WHERE id = p_queue_id;
  IF v_queue_limits > 0 THEN
    SELECT id INTO v_ignored FROM queues WHERE id = p_queue_id FOR UPDATE;
  END IF;
  SET p_limits = p_app_limits | v_queue_limits;
END
