-- session_recover: the recovery a claim runs first on its session's queues (SPEC 3): expired
-- leases (up to 20) and DELAYED tasks whose backoff has run out (up to 70), so an expired
-- lease is recovered at the next claim on its queue even without the sweeper. Called by
-- worker_claim and worker_report_claim before their own transaction, it is a batch of
-- independent one-item transactions, like lease_sweep's: each item takes a gate of the
-- namespace and its own rows only, so a claim never holds one session's rows while it
-- recovers another session's attempt, nor a recovered key while it locks its candidates'.
-- Most claims find nothing to recover: one plain read over the session's queues
-- (session_recovery_due, the probe's), which the caller asks first, says so, and this walk is
-- called only then (its frame on every claim cost about what a statement does: sql/README.md,
-- "What a call costs").
-- Params: namespace, session internal id. No result set.
-- Locks, per item: namespace_gate's, then attempt_recover's, or task_enter_due's (the key row,
--   then the task row).
CREATE PROCEDURE session_recover(IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  recovery_queues: LOOP
    SET v_next = NULL;
    SELECT MIN(queue_id) INTO v_next FROM worker_session_queues
     WHERE session_id = p_session_id AND queue_id > v_queue;
    IF v_next IS NULL THEN LEAVE recovery_queues; END IF;
    SET v_queue = v_next;
    recover_loop: LOOP
      SET v_next = NULL;
      SELECT id INTO v_next FROM attempts FORCE INDEX (ix_attempts_queue_lease)
       WHERE queue_id = v_queue AND state IN ('LEASED', 'RUNNING') AND lease_expires_at <= v_now
       LIMIT 1;
      IF v_next IS NULL OR v_done >= 20 THEN LEAVE recover_loop; END IF;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
      CALL attempt_recover(v_next, 'system:claim', v_limits);
      COMMIT;
      SET v_done = v_done + 1;
    END LOOP;
    -- Retry backoff that has run out: DELAYED tasks re-enter their lane (procrastinate #1599).
    -- A plain read finds the task and task_enter_due locks it by key and checks it again: a
    -- locking range read also locks the first index row past the range, another queue's, and
    -- deadlocked with that row's own claim (sql/README.md, "Locking reads").
    due_loop: LOOP
      SET v_next = NULL;
      SELECT id INTO v_next FROM tasks FORCE INDEX (ix_tasks_queue_due)
       WHERE queue_id = v_queue AND lane = 'DELAYED' AND available_at <= v_now
       LIMIT 1;
      IF v_next IS NULL OR v_done >= 70 THEN LEAVE due_loop; END IF;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      CALL namespace_gate(p_namespace_id, 0, v_app, v_limits);
      CALL task_enter_due(v_next, v_now);
      COMMIT;
      SET v_done = v_done + 1;
    END LOOP;
  END LOOP;
END
