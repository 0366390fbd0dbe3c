-- task_enter_lane: put a WAITING task into its dispatch lane.
-- Helper inside the caller's transaction; the caller holds a gate of the namespace and the
-- task row and has set state = 'WAITING' and available_at.
--   available_at in the future           -> DELAYED (the due sweep re-enters it later)
--   unkeyed                              -> READY
--   keyed, key with room, no other candidate, queue ACTIVE -> READY and the key's candidate,
--                                           or DELAYED and its candidate while the key's rate
--                                           lets no permit begin (P6, key_lane)
--   otherwise                            -> BLOCKED (parked; promoted by a release)
-- Locks: the key's concurrency_resources row (key_lane: created on first use at its stripe's floor, K7, R5).
CREATE PROCEDURE task_enter_lane(IN p_task_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_available DATETIME(6);
  DECLARE v_queue_state VARCHAR(10);
  DECLARE v_resource BIGINT UNSIGNED;
  DECLARE v_lane VARCHAR(10);
  DECLARE v_until DATETIME(6);
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);

  SELECT t.namespace_id, t.concurrency_key, t.available_at, q.state
    INTO v_ns, v_key, v_available, v_queue_state
    FROM tasks t JOIN queues q ON q.id = t.queue_id WHERE t.id = p_task_id;

  IF v_available > v_now THEN
    UPDATE tasks SET lane = 'DELAYED' WHERE id = p_task_id;
  ELSEIF v_key = '' THEN
    UPDATE tasks SET lane = 'READY' WHERE id = p_task_id;
  ELSE
    CALL key_lane(v_ns, v_key, v_queue_state, p_task_id, v_resource, v_lane, v_until);
    UPDATE tasks SET lane = v_lane, available_at = COALESCE(v_until, available_at)
     WHERE id = p_task_id;
    IF v_lane = 'READY' OR v_until IS NOT NULL THEN
      UPDATE concurrency_resources SET candidate_task_id = p_task_id WHERE id = v_resource;
    ELSE
      -- Parked: a candidacy it held while it waited for the key's rate passes on.
      UPDATE concurrency_resources SET candidate_task_id = NULL
       WHERE id = v_resource AND candidate_task_id = p_task_id;
      IF ROW_COUNT() = 1 THEN
        CALL key_promote_next(v_resource);
      END IF;
    END IF;
  END IF;
END
