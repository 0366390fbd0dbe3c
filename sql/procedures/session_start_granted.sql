-- session_start_granted: start what the caller's claim just granted (LEASED -> RUNNING), for
-- worker_claim and worker_report_claim asked to start (p_start: a worker whose every claimed
-- attempt has a free handler, W3). The same change attempt_start_many makes to its group:
-- attempt and task RUNNING, one STARTED history row each, in the claim's transaction, so the
-- claim's answer is the start's and a worker's round is one request.
-- Helper inside the caller's transaction: no transaction control, no handler.
-- Params: namespace, the session's internal and public ids (the history's actor), the first
--   attempt id the claim granted (NULL: nothing granted, nothing to do). The claim holds the
--   session row, so the session's attempts from p_first_attempt on are its grants (the rule
--   session_assignments answers by).
-- Locks: none beyond the caller's: the attempts and tasks rows are the ones its grant wrote.
CREATE PROCEDURE session_start_granted(IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
                                       IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                       IN p_first_attempt BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE v_ids MEDIUMTEXT;
  IF p_first_attempt IS NOT NULL THEN
    -- The grants' ids by a plain read (this transaction's own rows), then each changed by its
    -- primary key. A locking read of the session's LEASED range also locks the first entry
    -- past it, the session's oldest RUNNING attempt, which a report of the same session holds
    -- while it waits for the session row this claim holds: 186 deadlocks in one e2e run of
    -- single submissions (sql/README.md, "Locking reads").
    SELECT JSON_ARRAYAGG(a.id) INTO v_ids
      FROM attempts a FORCE INDEX (ix_attempts_session)
     WHERE a.session_id = p_session_id AND a.state = 'LEASED' AND a.id >= p_first_attempt;
    UPDATE JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) g
      STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = g.id
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
       SET a.state = 'RUNNING', a.started_at = v_now, t.state = 'RUNNING', t.updated_at = v_now;
    INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                              from_state, to_state, actor, details, created_at)
    SELECT a.task_id, p_namespace_id, a.id, NULLIF(a.concurrency_token, 0), 'STARTED', 'LEASED',
           'RUNNING', CONCAT('session:', p_session_public_id), NULL, v_now
      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$')) g
      STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = g.id
     ORDER BY a.id;
  END IF;
END
