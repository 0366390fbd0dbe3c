-- task_lock_waiting: lock a task that may be WAITING in the lock order its lane asks for, for
-- a change that takes it out of dispatch (cancel, the deadline sweep). Helper inside the
-- caller's transaction; the caller holds a gate of the namespace (and the application row and
-- the task's current attempt where it needs them) and passes the application's quotas.
-- Out: the task's state, read under its lock, and the limits for attempt_release and
-- task_finish (queue_limits).
-- A parked (BLOCKED) keyed task is locked after its key row, as a release locks the key and
-- then the parked task it promotes: the other way round a cancel and that release would each
-- hold what the other waits for. Any other task (a READY candidate, which a claim locks before
-- its key, a DELAYED one, one leased) is locked first and its key, if it needs it, later. The
-- lane is read plainly first; one that changes before the lock (a parked task promoted just
-- then) only risks a deadlock, which the shell retries whole.
-- Locks: [the key row, for a BLOCKED keyed task], the queue row where the queue has a limit,
--   the tasks row.
CREATE PROCEDURE task_lock_waiting(IN p_task_id BIGINT UNSIGNED, IN p_app_limits TINYINT UNSIGNED,
                                   OUT p_state VARCHAR(20), OUT p_limits TINYINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_lane VARCHAR(10);
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_ignored BIGINT UNSIGNED;
  SET p_state = NULL;
  SELECT namespace_id, concurrency_key, lane, queue_id INTO v_ns, v_key, v_lane, v_queue
    FROM tasks WHERE id = p_task_id;
  CALL queue_limits(v_queue, p_app_limits, p_limits);
  IF v_key <> '' AND v_lane = 'BLOCKED' THEN
    SELECT id INTO v_ignored FROM concurrency_resources
     WHERE namespace_id = v_ns AND concurrency_key = v_key FOR UPDATE;
  END IF;
  SELECT state INTO p_state FROM tasks WHERE id = p_task_id FOR UPDATE;
END
