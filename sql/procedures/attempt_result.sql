-- attempt_result: report an attempt's outcome (W3, SPEC 3); the rules are attempt_result_one's.
-- The same result repeated by the same session returns the stored outcome and changes nothing
-- (no second release, K6); any other call for an attempt that is not current is LEASE_LOST.
-- Params: namespace, session, attempt, outcome, retryable (0/1), result JSON, error JSON.
-- Result set: {attempt_id, task_id, duplicate}.
-- Errors: NOT_FOUND, LEASE_LOST, STATE_CONFLICT (result before start).
-- Locks: a gate of the namespace and, where the application has quotas, its row
--   (namespace_gate), then those of attempt_result_one.
CREATE PROCEDURE attempt_result(
  IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_outcome VARCHAR(16), IN p_retryable TINYINT,
  IN p_result MEDIUMTEXT, IN p_error MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_duplicate TINYINT;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  CALL attempt_result_one(p_namespace_id, v_session, p_session_public_id, p_attempt_public_id, p_outcome,
                          p_retryable, p_result, p_error, v_limits, v_task, v_duplicate);
  COMMIT;
  SELECT p_attempt_public_id AS attempt_id, t.public_id AS task_id, v_duplicate AS duplicate
    FROM tasks t WHERE t.id = v_task;
END
