-- session_start_granted: start the grants worker_claim_grant made one by one (attempt_grant:
-- a single grant, or a group the set-based path refused), LEASED -> RUNNING, when its caller
-- was asked to start (p_start: a worker whose every claimed attempt has a free handler, W3).
-- The change attempt_start_many makes to its group (attempt_start_group: attempt and task
-- RUNNING, one STARTED history row each), in the claim's transaction, so the claim's answer is
-- the start's and a worker's round is one request. (The set-based grant writes its rows
-- RUNNING itself.)
-- Helper inside the caller's transaction: no transaction control, no handler. Its group
-- table, start_group_mem, is made and emptied by worker_claim_tables before the transaction.
-- Params: namespace, the session's internal and public ids (the history's actor), the first
--   attempt id the claim granted (NULL: nothing granted, nothing to do). The claim holds the
--   session row, so the session's LEASED attempts from p_first_attempt on are its grants (the
--   rule session_assignments answers by).
-- Locks: none beyond the caller's: the attempts and tasks rows are the ones its grant wrote.
CREATE PROCEDURE session_start_granted(IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
                                       IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                       IN p_first_attempt BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  IF p_first_attempt IS NOT NULL THEN
    -- The grants through the session's index into the group table (worker_claim_tables made
    -- it), then each changed by its primary key. The read takes no lock (an INSERT ... SELECT
    -- at READ COMMITTED reads consistently, and these are this transaction's own rows): a
    -- locking read of the session's LEASED range also locks the first entry past it, the
    -- session's oldest RUNNING attempt, which a report of the same session holds while it
    -- waits for the session row this claim holds: 186 deadlocks in one e2e run of single
    -- submissions (sql/README.md, "Locking reads").
    INSERT INTO start_group_mem (seq, attempt_id, task_id, token)
    SELECT a.id, a.id, a.task_id, a.concurrency_token
      FROM attempts a FORCE INDEX (ix_attempts_session)
     WHERE a.session_id = p_session_id AND a.state = 'LEASED' AND a.id >= p_first_attempt;
    CALL attempt_start_group(p_namespace_id, p_session_public_id, v_now);
  END IF;
END
