-- attempt_start: confirm the execution right (LEASED -> RUNNING, W3). Business code runs only
-- after this succeeds. Repeating it for a RUNNING attempt of the same session is harmless.
-- Result set: the attempt (attempt_detail columns).
-- Errors and locks: attempt_start_one (NOT_FOUND, LEASE_LOST; the attempts row, then its
--   tasks row; no application lock).
CREATE PROCEDURE attempt_start(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                               IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  CALL attempt_start_one(p_namespace_id, v_session, p_session_public_id, p_attempt_public_id,
                         v_attempt);
  COMMIT;
  CALL attempt_detail(v_attempt);
END
