-- key_lane: the lane of a WAITING keyed task that is available now, and its key's row.
-- Helper inside the caller's transaction (task_enter_lane, task_submit_one): the one place of
-- the parking rule. Locks the key's row (key_row_lock: made on first use at its stripe's
-- token floor). The task is the key's next when the key has room (P1: fewer holders than its
-- limit) and no other candidate (p_task_id: the task entering again, 0 for a new one) and the
-- task's queue is ACTIVE: READY, or, while the key's rate (P6) lets no permit begin yet,
-- DELAYED until it does (p_until; the due sweep enters it again then), not claimable
-- meanwhile (P4). Either way the caller makes it the key's candidate, so later tasks park.
-- Otherwise BLOCKED (parked until a release promotes it). A task parked on a key none waited
-- for starts the key's waiting_since.
-- Locks: key_row_lock's.
CREATE PROCEDURE key_lane(IN p_namespace_id BIGINT UNSIGNED,
                          IN p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                          IN p_queue_state VARCHAR(10), IN p_task_id BIGINT UNSIGNED,
                          OUT p_resource_id BIGINT UNSIGNED, OUT p_lane VARCHAR(10),
                          OUT p_until DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_holders INT;
  DECLARE v_room TINYINT;
  DECLARE v_candidate BIGINT UNSIGNED;
  DECLARE v_waiting DATETIME(6);
  DECLARE v_rate_next DATETIME(6);
  SET p_until = NULL;
  CALL key_row_lock(p_namespace_id, p_key, p_resource_id, v_holders, v_room, v_candidate,
                    v_waiting, v_rate_next);
  SET p_lane = IF(v_room AND (v_candidate IS NULL OR v_candidate = p_task_id)
                  AND p_queue_state = 'ACTIVE', 'READY', 'BLOCKED');
  IF p_lane = 'READY' AND v_rate_next > UTC_TIMESTAMP(6) THEN
    SET p_lane = 'DELAYED', p_until = v_rate_next;
  END IF;
  IF p_lane <> 'READY' AND v_waiting IS NULL THEN
    UPDATE concurrency_resources SET waiting_since = UTC_TIMESTAMP(6) WHERE id = p_resource_id;
  END IF;
END
