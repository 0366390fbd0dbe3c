-- attempt_start_one: the body of attempt_start (LEASED -> RUNNING), for attempt_start and
-- attempt_start_many. Helper inside the caller's transaction: no transaction control, no
-- handler; errors are SIGNALled to the caller. p_session_id is the internal id of the caller's
-- session in this namespace (NULL when there is none: the call is LEASE_LOST), resolved once by
-- the caller; p_session_public_id names it in the history. Sets p_attempt_id to attempts.id.
-- Repeating it for a RUNNING attempt of the same session is harmless.
-- Errors: NOT_FOUND (unknown attempt in this namespace), LEASE_LOST (another session, lease
--   expired, or the attempt already ended: a late start changes nothing).
-- Locks: the attempts row alone, then its tasks row; no counter changes, so no application lock.
CREATE PROCEDURE attempt_start_one(IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
                                   IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                   IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                   OUT p_attempt_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(20);
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED;
  DECLARE v_expires DATETIME(6);
  DECLARE v_now DATETIME(6);

  SET p_attempt_id = NULL;
  -- Lock the attempt row alone: a join FOR UPDATE would also lock the session row, out of
  -- the documented order, and deadlock with a claim recovering this attempt.
  SELECT id, task_id, state, concurrency_token, lease_expires_at, session_id
    INTO v_attempt, v_task, v_state, v_token, v_expires, v_session
    FROM attempts
   WHERE public_id = p_attempt_public_id AND namespace_id = p_namespace_id
     FOR UPDATE;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF v_attempt IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: attempt not found';
  END IF;
  IF NOT (v_session <=> p_session_id) OR v_state NOT IN ('LEASED', 'RUNNING') OR v_expires <= v_now THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: attempt is no longer the current holder';
  END IF;
  IF v_state = 'LEASED' THEN
    UPDATE attempts SET state = 'RUNNING', started_at = v_now WHERE id = v_attempt;
    UPDATE tasks SET state = 'RUNNING', updated_at = v_now WHERE id = v_task;
    CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'STARTED', 'LEASED', 'RUNNING',
                     CONCAT('session:', p_session_public_id), NULL);
  END IF;
  SET p_attempt_id = v_attempt;
END
