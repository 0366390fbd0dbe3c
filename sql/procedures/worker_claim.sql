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
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces

  -- The session and how many queues it has (for the recovery probe), in one read.
  SELECT MIN(s.id), MIN(s.application_id), COUNT(wq.queue_id), MIN(wq.queue_id)
    INTO v_session, v_app, v_queues, v_only_queue
    FROM worker_sessions s LEFT JOIN worker_session_queues wq ON wq.session_id = s.id
   WHERE s.public_id = p_session_public_id AND s.namespace_id = p_namespace_id;
  IF v_session IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: worker session not found';
  END IF;
  CALL session_recover(p_namespace_id, v_session, v_queues, v_only_queue);
  CALL worker_claim_tables();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
  CALL worker_claim_grant(p_namespace_id, v_session, v_app, p_session_public_id, p_max, v_limits,
                          0, p_start, v_first_attempt);
  COMMIT;
  CALL session_assignments(v_session, COALESCE(v_first_attempt, 18446744073709551615), 18446744073709551615);
END
