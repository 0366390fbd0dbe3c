-- attempt_result_one: the body of attempt_result, for attempt_result and attempt_result_many.
-- Helper inside the caller's transaction: no transaction control, no handler; errors are
-- SIGNALled to the caller. p_session_id is the internal id of the caller's session in this
-- namespace (NULL when there is none: every call is then LEASE_LOST), resolved once by the
-- caller; p_session_public_id names it in the history. Sets p_task_id (tasks.id) and p_duplicate (1 when this exact result
-- was already stored for this session: answered again, nothing changed).
--   succeeded                                  -> attempt SUCCEEDED, task SUCCEEDED
--   failed, retryable, attempts and deadline left -> attempt RETRY, task WAITING (DELAYED by
--        exponential backoff with jitter); the key is released, not held while backing off
--   failed otherwise                           -> attempt FAILED, task FAILED
--   unknown                                    -> attempt UNKNOWN, task NEEDS_REVIEW (key released)
-- Any other call for an attempt that is not current is LEASE_LOST.
-- Errors: NOT_FOUND, LEASE_LOST, STATE_CONFLICT (result before start).
-- p_app_limits: the application's quotas as the caller's gate read them (namespace_gate, which
--   locked its row where it has one).
-- Locks, in order (after the caller's gate and application row): attempts row, tasks row, the
--   queues row where the queue has a limit (queue_limits' rule, read here with the backoff),
--   then those of attempt_release (worker_sessions, concurrency_resources, permits rows, the
--   promoted task) and, for a retry, task_enter_lane's key row.
CREATE PROCEDURE attempt_result_one(
  IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_outcome VARCHAR(16), IN p_retryable TINYINT,
  IN p_result MEDIUMTEXT, IN p_error MEDIUMTEXT, IN p_app_limits TINYINT UNSIGNED,
  OUT p_task_id BIGINT UNSIGNED, OUT p_duplicate TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(20);
  DECLARE v_session BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_expires DATETIME(6);
  DECLARE v_stored CHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_token BIGINT UNSIGNED;
  DECLARE v_fp CHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_started INT UNSIGNED;
  DECLARE v_max_attempts INT UNSIGNED;
  DECLARE v_deadline DATETIME(6);
  DECLARE v_base INT UNSIGNED;
  DECLARE v_cap INT UNSIGNED;
  DECLARE v_delay DOUBLE;
  DECLARE v_available DATETIME(6);
  DECLARE v_actor VARCHAR(200);
  DECLARE v_now DATETIME(6);
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_ignored BIGINT UNSIGNED;
  DECLARE v_end VARCHAR(20);

  SET p_task_id = NULL, p_duplicate = 0;
  SET v_fp = SHA2(CONCAT(p_outcome, '|', COALESCE(p_retryable, 0), '|', COALESCE(p_result, 'null'),
                         '|', COALESCE(p_error, 'null')), 256);
  SET v_actor = CONCAT('session:', p_session_public_id);
  -- Found and locked in one read (uq_attempts_public_id), nothing being locked before it.
  SELECT id, application_id, task_id, state, lease_expires_at, result_sha256, concurrency_token,
         queue_id, session_id
    INTO v_attempt, v_app, v_task, v_state, v_expires, v_stored, v_token, v_queue, v_session
    FROM attempts WHERE public_id = p_attempt_public_id AND namespace_id = p_namespace_id
     FOR UPDATE;
  IF v_attempt IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: attempt not found';
  END IF;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);

  SET p_task_id = v_task;
  IF v_session = p_session_id AND v_stored = v_fp THEN
    -- Duplicate of the stored result: answer it again, change nothing.
    SET p_duplicate = 1;
  ELSE
    IF NOT (v_session <=> p_session_id) OR v_state NOT IN ('LEASED', 'RUNNING') OR v_expires <= v_now THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'LEASE_LOST: attempt is no longer the current holder';
    END IF;
    IF v_state = 'LEASED' THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: attempt was not started; call start first';
    END IF;
    SELECT max_attempts, deadline_at INTO v_max_attempts, v_deadline
      FROM tasks WHERE id = v_task FOR UPDATE;
    -- The queue read plainly (its settings never change) and locked only where it has a
    -- limit: a locking read joined to it would lock the row every result of the queue takes.
    SELECT retry_backoff_seconds, retry_backoff_max_seconds,
           4 * (max_concurrency IS NOT NULL) + 8 * (max_unfinished IS NOT NULL)
      INTO v_base, v_cap, v_limits
      FROM queues WHERE id = v_queue;
    IF v_limits > 0 THEN
      SELECT id INTO v_ignored FROM queues WHERE id = v_queue FOR UPDATE;
    END IF;
    SET v_limits = v_limits | p_app_limits;
    -- The attempt's end is decided before it is written, so that one UPDATE stores the
    -- outcome, the state and finished_at (attempt_release is told not to write it again).
    IF p_outcome = 'succeeded' THEN
      SET v_end = 'SUCCEEDED';
    ELSEIF p_outcome = 'unknown' THEN
      SET v_end = 'UNKNOWN';
    ELSE
      SELECT COUNT(*) INTO v_started FROM attempts WHERE task_id = v_task AND started_at IS NOT NULL;
      -- Exponential backoff with jitter in [0.5, 1.0] of the capped delay.
      SET v_delay = LEAST(v_cap, v_base * POW(2, LEAST(v_started, 30) - 1)) * (0.5 + RAND() / 2);
      SET v_available = v_now + INTERVAL ROUND(v_delay * 1000000) MICROSECOND;
      SET v_end = IF(p_retryable = 1 AND v_started < v_max_attempts
                     AND (v_deadline IS NULL OR v_available < v_deadline), 'RETRY', 'FAILED');
    END IF;
    UPDATE attempts SET outcome = p_outcome, retryable = p_retryable, result = p_result,
                        error = p_error, result_sha256 = v_fp, state = v_end, finished_at = v_now
     WHERE id = v_attempt;
    CALL attempt_release(v_attempt, v_app, v_queue, v_session, NULL, v_limits, v_now,
                         v_token);

    IF v_end = 'SUCCEEDED' THEN
      CALL task_finish(v_task, v_app, v_queue, 'SUCCEEDED', p_result, NULL, v_limits);
      CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'SUCCEEDED', 'RUNNING',
                       'SUCCEEDED', v_actor, NULL);
    ELSEIF v_end = 'UNKNOWN' THEN
      UPDATE tasks SET state = 'NEEDS_REVIEW', lane = NULL, error = COALESCE(p_error, error),
                       updated_at = v_now
       WHERE id = v_task;
      CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'OUTCOME_UNKNOWN', 'RUNNING',
                       'NEEDS_REVIEW', v_actor, 'worker reported an unknown outcome');
    ELSEIF v_end = 'RETRY' THEN
      UPDATE tasks SET state = 'WAITING', available_at = v_available,
                       error = COALESCE(p_error, error), updated_at = v_now
       WHERE id = v_task;
      CALL task_enter_lane(v_task);
      CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'RETRY_SCHEDULED', 'RUNNING',
                       'WAITING', v_actor, CONCAT('retry after ', ROUND(v_delay, 3), 's'));
    ELSE
      CALL task_finish(v_task, v_app, v_queue, 'FAILED', NULL, p_error, v_limits);
      CALL history_add(v_task, p_namespace_id, v_attempt, v_token, 'FAILED', 'RUNNING', 'FAILED',
                       v_actor, IF(p_retryable = 1, 'attempts or deadline exhausted', NULL));
    END IF;
  END IF;
END
