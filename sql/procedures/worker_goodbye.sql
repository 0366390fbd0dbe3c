-- worker_goodbye: close a session (W7). In-flight attempts keep their permits and end by
-- result or lease expiry (K6: a disconnecting worker releases nothing directly); results for
-- them are still accepted from this session.
-- Result set: {session_id, state, in_flight}.
-- Errors: NOT_FOUND.
-- Locks: worker_sessions row.
CREATE PROCEDURE worker_goodbye(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id FOR UPDATE;
  IF v_session IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: worker session not found';
  END IF;
  UPDATE worker_sessions SET state = 'CLOSED', closed_at = UTC_TIMESTAMP(6),
                             last_seen_at = UTC_TIMESTAMP(6)
   WHERE id = v_session AND state = 'OPEN';
  COMMIT;
  SELECT public_id AS session_id, state, in_flight, capacity, concurrency_keys
    FROM worker_sessions WHERE id = v_session;
END
