-- key_lane: the lane of a WAITING keyed task that is available now, and its key's row.
-- Helper inside the caller's transaction (task_enter_lane, task_submit_one): the one place of
-- the parking rule. Locks the key's concurrency_resources row, creating it on first use (or
-- after keys_reclaim deleted it) at its stripe's token floor (key_floor), so that no token of
-- the key goes back (R5, K7). The lookup comes first: a key in use never touches its floor. READY when the key has no holder and no candidate and the task's queue is
-- ACTIVE (the caller then makes the task the key's candidate), else BLOCKED (parked until a
-- release promotes it). A task parked on a key none waited for starts the key's waiting_since.
-- Locks: the key's concurrency_resources row; for a new row, its key_floors row first
--   (shared).
CREATE PROCEDURE key_lane(IN p_namespace_id BIGINT UNSIGNED,
                          IN p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                          IN p_queue_state VARCHAR(10), OUT p_resource_id BIGINT UNSIGNED,
                          OUT p_lane VARCHAR(10))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_holder BIGINT UNSIGNED;
  DECLARE v_candidate BIGINT UNSIGNED;
  DECLARE v_waiting DATETIME(6);
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_floor BIGINT UNSIGNED;
  SET p_resource_id = NULL;
  -- A locking read of a key with no row locks nothing at READ COMMITTED (no gap lock).
  SELECT id, holder_attempt_id, candidate_task_id, waiting_since
    INTO p_resource_id, v_holder, v_candidate, v_waiting
    FROM concurrency_resources
   WHERE namespace_id = p_namespace_id AND concurrency_key = p_key FOR UPDATE;
  IF p_resource_id IS NULL THEN
    CALL key_floor(p_namespace_id, p_key, v_floor);
    INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, created_at, updated_at)
      VALUES (p_namespace_id, p_key, v_floor, v_now, v_now)
      ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);
    SET p_resource_id = LAST_INSERT_ID();
    SELECT holder_attempt_id, candidate_task_id, waiting_since
      INTO v_holder, v_candidate, v_waiting
      FROM concurrency_resources WHERE id = p_resource_id FOR UPDATE;
  END IF;
  SET p_lane = IF(v_holder IS NULL AND v_candidate IS NULL AND p_queue_state = 'ACTIVE',
                  'READY', 'BLOCKED');
  IF p_lane = 'BLOCKED' AND v_waiting IS NULL THEN
    UPDATE concurrency_resources SET waiting_since = v_now WHERE id = p_resource_id;
  END IF;
END
