-- attempt_renew: extend the lease and every permit of a current attempt (W3, K6), never past
-- the task's total deadline.
-- Result set: {lease_expires_at}.
-- Errors: NOT_FOUND, LEASE_LOST (another session, lease already expired, attempt ended).
-- Locks: attempts row, then its permits rows (same order as recovery: attempt before permits).
CREATE PROCEDURE attempt_renew(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                               IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_state VARCHAR(20);
  DECLARE v_session CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_expires DATETIME(6);
  DECLARE v_lease INT UNSIGNED;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_new DATETIME(6);
  DECLARE v_now DATETIME(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- Lock the attempt row alone (then its permits); the session, queue and task rows are only
  -- read: locking them here would serialise renewals with claims and break the lock order.
  SELECT id, state, lease_expires_at INTO v_attempt, v_state, v_expires
    FROM attempts
   WHERE public_id = p_attempt_public_id AND namespace_id = p_namespace_id
     FOR UPDATE;
  SELECT s.public_id, q.lease_seconds, t.deadline_at INTO v_session, v_lease, v_deadline
    FROM attempts a
    JOIN worker_sessions s ON s.id = a.session_id
    JOIN queues q ON q.id = a.queue_id
    JOIN tasks t ON t.id = a.task_id
   WHERE a.id = v_attempt;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF v_attempt IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: attempt not found';
  END IF;
  IF v_session <> p_session_public_id OR v_state NOT IN ('LEASED', 'RUNNING') OR v_expires <= v_now THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: attempt is no longer the current holder';
  END IF;
  SET v_new = v_now + INTERVAL v_lease SECOND;
  IF v_deadline IS NOT NULL AND v_deadline < v_new THEN
    SET v_new = v_deadline;
  END IF;
  IF v_new > v_expires THEN
    UPDATE attempts SET lease_expires_at = v_new WHERE id = v_attempt;
    UPDATE permits SET expires_at = v_new WHERE attempt_id = v_attempt;
  ELSE
    SET v_new = v_expires;
  END IF;
  COMMIT;
  SELECT v_new AS lease_expires_at;
END
