-- attempt_release: end an attempt's permits (K6 "released in the same transaction").
-- Helper inside the caller's transaction. The caller holds a gate of the namespace, the
-- attempt and task rows, and the application and queue rows where they have limits, and has
-- checked the attempt is LEASED or RUNNING; it passes the attempt's application, queue and
-- session (read already), its new state, and the limits (bits: 1 the application's
-- max_active_attempts, 2 its max_unfinished, 4 the queue's max_concurrency, 8 its
-- max_unfinished), and the instant to stamp, read by the caller after its row locks: a
-- result passes the one its other rows get, so a retry's wait counts from the attempt's
-- finish. p_new_state NULL: the caller wrote the attempt's state and finished_at itself (a
-- result, in the UPDATE that stores its outcome). p_token: the attempt's concurrency token;
-- every keyed grant has one (at least 1) and an unkeyed attempt none (NULL or 0), so a KEY
-- permit is looked for only when it is above 0.
-- Deletes the QUEUE and KEY permit rows, decrements the session's in_flight and the active
-- counters that are kept (bits 1 and 4), frees the attempt's slot of the key (slot 0: the
-- holder NULL; another: its key_slots row, slot_holders - 1; version + 1) and promotes the
-- next parked task where the key has room and no candidate.
-- A key release whose holder is not this attempt changes nothing: a late writer never frees a
-- key it no longer holds (Solid Queue #689/#761).
-- Locks, in order: worker_sessions, concurrency_resources, key_slots, permits rows, then the
-- promoted task (key_promote_next).
CREATE PROCEDURE attempt_release(IN p_attempt_id BIGINT UNSIGNED, IN p_app BIGINT UNSIGNED,
                                 IN p_queue BIGINT UNSIGNED, IN p_session BIGINT UNSIGNED,
                                 IN p_new_state VARCHAR(20), IN p_limits TINYINT UNSIGNED,
                                 IN p_now DATETIME(6), IN p_token BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_resource BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_slot SMALLINT UNSIGNED DEFAULT 0;

  IF p_limits & 4 THEN
    UPDATE queues SET active_attempts = active_attempts - 1 WHERE id = p_queue;
  END IF;
  UPDATE worker_sessions SET in_flight = in_flight - 1 WHERE id = p_session;
  -- The KEY permit row names the resource (the primary key); lock it and re-check the holder
  -- of the attempt's slot: slot 0 on the key row, any other in key_slots (P2).
  IF p_token > 0 THEN
    SELECT concurrency_slot INTO v_slot FROM attempts WHERE id = p_attempt_id;
  END IF;
  IF p_token > 0 AND v_slot = 0 THEN
    SELECT r.id INTO v_resource
      FROM permits p JOIN concurrency_resources r ON r.id = p.scope_id
     WHERE p.attempt_id = p_attempt_id AND p.kind = 'KEY' AND r.holder_attempt_id = p_attempt_id
       FOR UPDATE;
    IF v_resource IS NOT NULL THEN
      UPDATE concurrency_resources
         SET holder_attempt_id = NULL, version = version + 1, updated_at = p_now
       WHERE id = v_resource;
    END IF;
  ELSEIF p_token > 0 THEN
    SELECT r.id INTO v_resource
      FROM permits p JOIN concurrency_resources r ON r.id = p.scope_id
     WHERE p.attempt_id = p_attempt_id AND p.kind = 'KEY' FOR UPDATE;
    IF v_resource IS NOT NULL THEN
      UPDATE key_slots SET attempt_id = NULL, updated_at = p_now
       WHERE resource_id = v_resource AND slot = v_slot AND attempt_id = p_attempt_id;
      IF ROW_COUNT() = 1 THEN
        UPDATE concurrency_resources
           SET slot_holders = slot_holders - 1, version = version + 1, updated_at = p_now
         WHERE id = v_resource;
      ELSE
        SET v_resource = NULL;  -- not this attempt's slot any more: nothing to free
      END IF;
    END IF;
  END IF;
  IF p_new_state IS NOT NULL THEN
    UPDATE attempts SET state = p_new_state, finished_at = p_now WHERE id = p_attempt_id;
  END IF;
  DELETE FROM permits WHERE attempt_id = p_attempt_id;
  IF p_limits & 1 THEN
    UPDATE applications SET active_attempts = active_attempts - 1 WHERE id = p_app;
  END IF;
  IF v_resource IS NOT NULL THEN
    CALL key_promote_next(v_resource);
  END IF;
END
