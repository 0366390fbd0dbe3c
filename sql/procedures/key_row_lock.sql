-- key_row_lock: lock a key's concurrency_resources row, creating it on first use (or after
-- keys_reclaim deleted it) at its stripe's token floor (key_floor), so that no token of the key
-- goes back (R5, K7), with the limit its policies give it (key_limit_init), and read it.
-- Helper inside the caller's transaction (key_lane, and a submission that decides on the key's
-- state: if_busy). The lookup comes first: a key in use never touches its floor.
-- Out: the row's id, its holders (slot 0's and the held slots of key_slots), whether it has
-- room for one more (P1: holders below its limit), its candidate and waiting_since, and for a
-- key with a rate when its next permit may begin (P6, key_rate_next; NULL: now).
-- Locks: the key's concurrency_resources row; for a new row, its key_floors row first
--   (shared), and the namespace's key_policies rows after it (shared).
CREATE PROCEDURE key_row_lock(IN p_namespace_id BIGINT UNSIGNED,
                              IN p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                              OUT p_resource_id BIGINT UNSIGNED, OUT p_holders INT,
                              OUT p_room TINYINT, OUT p_candidate BIGINT UNSIGNED,
                              OUT p_waiting DATETIME(6), OUT p_rate_next DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_floor BIGINT UNSIGNED;
  SET p_resource_id = NULL;
  -- A locking read of a key with no row locks nothing at READ COMMITTED (no gap lock).
  SELECT id, (holder_attempt_id IS NOT NULL) + slot_holders,
         (holder_attempt_id IS NOT NULL) + slot_holders < key_limit, candidate_task_id, waiting_since,
         IF(rate_permits IS NULL, NULL, key_rate_next(id, rate_permits, rate_seconds))
    INTO p_resource_id, p_holders, p_room, p_candidate, p_waiting, p_rate_next
    FROM concurrency_resources
   WHERE namespace_id = p_namespace_id AND concurrency_key = p_key FOR UPDATE;
  IF p_resource_id IS NULL THEN
    CALL key_floor(p_namespace_id, p_key, v_floor);
    INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, created_at, updated_at)
      VALUES (p_namespace_id, p_key, v_floor, v_now, v_now)
      ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);
    SET p_resource_id = LAST_INSERT_ID();
    CALL key_limit_init(p_namespace_id, p_resource_id);
    SELECT (holder_attempt_id IS NOT NULL) + slot_holders,
           (holder_attempt_id IS NOT NULL) + slot_holders < key_limit, candidate_task_id, waiting_since,
           IF(rate_permits IS NULL, NULL, key_rate_next(id, rate_permits, rate_seconds))
      INTO p_holders, p_room, p_candidate, p_waiting, p_rate_next
      FROM concurrency_resources WHERE id = p_resource_id FOR UPDATE;
  END IF;
END
