-- worker_report_claim: the results of up to 100 attempts of one session, then a claim of up
-- to p_max tasks for it, in ONE transaction (POST /v1/workers/{session_id}/report-and-claim).
-- It is what a worker does between two rounds when its slots free only as their results are
-- recorded: one call and one commit where attempt_result_many and worker_claim take two, and
-- the slots the results free are free for the claim (bench/README.md).
-- Each half keeps its own semantics: the results are attempt_result_many's (each item
-- answered with its own outcome or error), the claim worker_claim's without the long poll
-- (capacity, quotas, keys, fairness and recovery alike). The claim never costs the results:
-- an unknown session answers every item LEASE_LOST and claims nothing; a closed one has its
-- results recorded and claims nothing (its next worker_claim says STATE_CONFLICT).
-- Params: namespace, session public id, items (as attempt_result_many), max (0..100, checked
--   by the shell; 0 claims nothing), start (1: what the claim grants is started in the same
--   transaction, as worker_claim's start).
-- Result sets: attempt_result_many's (one row per item), then worker_claim's (task.assign
--   rows of the attempts granted by this call).
--
-- Recovery of the session's queues runs first, in transactions of its own (session_recover).
-- Locks: attempt_result_apply's (a gate of the namespace first), then worker_claim_grant's in
-- its p_skip_keys form: the results hold key rows already, so the claim takes no further key
-- row it would have to wait for (a candidate whose key another transaction holds is left for
-- a later claim), and its second pass through the lock order cannot close a cycle.
-- Deadlocks and lock-wait timeouts roll back both halves (outer handler); the shell retries
-- the call whole.
CREATE PROCEDURE worker_report_claim(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                     IN p_items MEDIUMTEXT, IN p_max INT UNSIGNED, IN p_start TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queues INT UNSIGNED;
  DECLARE v_only_queue BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_out MEDIUMTEXT;
  DECLARE v_first_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_error VARCHAR(512);
  DECLARE v_recovered TINYINT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  -- The session, resolved once for both halves (NULL: every item is LEASE_LOST).
  -- With how many queues it has (for the recovery probe), in one read.
  SELECT MIN(s.id), COUNT(wq.queue_id), MIN(wq.queue_id) INTO v_session, v_queues, v_only_queue
    FROM worker_sessions s LEFT JOIN worker_session_queues wq ON wq.session_id = s.id
   WHERE s.public_id = p_session_public_id AND s.namespace_id = p_namespace_id;
  IF v_session IS NOT NULL AND p_max > 0 THEN
    -- The recovery probe, then the walk only where it found something (session_recover).
    CALL session_recovery_due(v_session, IF(v_queues = 1, v_only_queue, 0), UTC_TIMESTAMP(6),
                              v_recovered);
    IF v_recovered THEN
      CALL session_recover(p_namespace_id, v_session);
    END IF;
  END IF;
  CALL attempt_result_tables();
  CALL worker_claim_tables();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL attempt_result_apply(p_namespace_id, p_session_public_id, p_items, v_session, v_app, v_limits, v_out);
  IF v_session IS NOT NULL AND p_max > 0 THEN
    -- A closed session signals STATE_CONFLICT in the grant before it writes anything; the
    -- savepoint keeps that from undoing the results all the same. Any other error of the
    -- grant (INTERNAL) rolls the whole call back, as it would a claim alone.
    SAVEPOINT claim_half;
    claim_half: BEGIN
      DECLARE EXIT HANDLER FOR SQLSTATE '45000'
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
        IF v_error NOT LIKE 'STATE\_CONFLICT:%' THEN
          RESIGNAL;
        END IF;
        ROLLBACK TO SAVEPOINT claim_half;
        SET v_first_attempt = NULL;
      END;
      CALL worker_claim_grant(p_namespace_id, v_session, v_app, p_session_public_id, p_max,
                              v_limits, 1, p_start, v_first_attempt);
    END claim_half;
  END IF;
  COMMIT;
  CALL attempt_result_answers(v_out);
  CALL session_assignments(COALESCE(v_session, 0), COALESCE(v_first_attempt, 18446744073709551615),
                           18446744073709551615);
END
