-- worker_claim: grant up to p_max tasks to a session in ONE transaction (K5, W2).
-- Params: namespace, session public id, max (1..100, checked by the shell), start (1: the
--   attempts granted are started in the same transaction, worker_claim_grant's p_start: for
--   a worker that runs each at once, one call where a claim and a start take two).
-- Result set: task.assign rows of the attempts granted by this call (session_assignments),
--   RUNNING when started.
-- Errors: NOT_FOUND (unknown session), STATE_CONFLICT (session closed).
--
-- Recovery of the session's queues runs first, item by item in transactions of their own
-- (session_recover). The body, its locks (a gate of the namespace first, namespace_gate, then
-- worker_claim_grant's) and fairness are worker_claim_grant's (shared with
-- worker_report_claim); this procedure resolves the session, and is the transaction and its
-- answer.
-- A claim that would find nothing (nothing was recovered, and the session has no room or no
-- READY task it may take: session_ready_tasks, a plain read) only marks the session seen, not
-- a transaction that takes a gate, empties the candidates table and locks the session row to
-- grant nothing: a long poll begins with such a claim whenever work is sparse. It writes
-- last_seen_at only when that is a second old or more: its readers (the claim's fairness, 5
-- seconds; the dashboard's live sessions; the retention of unseen sessions) need no finer
-- stamp, and a claim that writes nothing reads only, with no commit to flush. A READY row the
-- read sees and another claim holds takes the whole path, which skips it; a task committed
-- after the read is the next claim's, as it is after the whole path's candidates read.
CREATE PROCEDURE worker_claim(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                              IN p_max INT UNSIGNED, IN p_start TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queues INT UNSIGNED;
  DECLARE v_only_queue BIGINT UNSIGNED;
  DECLARE v_first_attempt BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_state VARCHAR(10);
  DECLARE v_free BIGINT;
  DECLARE v_recovered TINYINT;
  DECLARE v_keys TINYINT;
  DECLARE v_ready TINYINT DEFAULT 0;
  DECLARE v_seen TINYINT DEFAULT 0;
  DECLARE v_recent TINYINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  -- The session, its room, whether it was seen in the last second, and how many queues it
  -- has (for the recovery probe), in one read.
  SELECT MIN(s.id), MIN(s.application_id), COUNT(wq.queue_id), MIN(wq.queue_id), MIN(s.state),
         MIN(s.concurrency_keys), MIN(CAST(s.capacity AS SIGNED) - CAST(s.in_flight AS SIGNED)),
         COALESCE(MIN(s.last_seen_at) >= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, 0)
    INTO v_session, v_app, v_queues, v_only_queue, v_state, v_keys, v_free, v_recent
    FROM worker_sessions s LEFT JOIN worker_session_queues wq ON wq.session_id = s.id
   WHERE s.public_id = p_session_public_id AND s.namespace_id = p_namespace_id;
  IF v_session IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: worker session not found';
  END IF;
  -- The recovery probe, then the walk only where it found something (session_recover).
  CALL session_recovery_due(v_session, IF(v_queues = 1, v_only_queue, 0), UTC_TIMESTAMP(6),
                            v_recovered);
  IF v_recovered THEN
    CALL session_recover(p_namespace_id, v_session);
  END IF;
  -- Room read before the recovery is room still when nothing was recovered (a recovery of
  -- the session's own attempts frees its slots). A closed session takes the whole path, which
  -- says STATE_CONFLICT under the session row's lock; one closed after the read is answered
  -- as a claim just before its close, and its next claim says STATE_CONFLICT.
  IF v_state = 'OPEN' AND NOT v_recovered THEN
    IF v_free > 0 THEN
      CALL session_ready_tasks(v_session, v_keys, v_ready);
    END IF;
    IF NOT v_ready AND v_recent THEN
      SET v_seen = 1;
    ELSEIF NOT v_ready THEN
      UPDATE worker_sessions SET last_seen_at = UTC_TIMESTAMP(6)
       WHERE id = v_session AND state = 'OPEN';
      SET v_seen = ROW_COUNT() > 0;
    END IF;
  END IF;
  IF NOT v_seen THEN
    CALL worker_claim_tables();
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
    CALL worker_claim_grant(p_namespace_id, v_session, v_app, p_session_public_id, p_max, v_limits,
                            0, p_start, v_first_attempt);
    COMMIT;
  END IF;
  -- No attempt granted (the first NULL) answers from the greatest id: no row.
  CALL session_assignments(v_session, COALESCE(v_first_attempt, 18446744073709551615), 18446744073709551615);
END
