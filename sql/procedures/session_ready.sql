-- session_ready: whether a claim by this session would find work now, read without locks. The
-- claim's long poll (orbit_shell/engine/longpoll.py) calls it between claims, so a waiting worker costs
-- an index probe per queue every few milliseconds instead of a claim transaction every 20-250 ms.
-- Work is what worker_claim takes or recovers: a READY task the session may take (unkeyed only
-- without concurrency_keys) in one of its ACTIVE queues while the session has room (capacity
-- above in_flight), or, room or not, a DELAYED task whose backoff has run out or an expired
-- lease in any of its queues.
-- A quota that stops the claim is not looked at: the poll does not trust a probe whose claim came
-- back empty (longpoll.py).
-- Params: namespace, session public id.
-- Result set: {ready: 1 or 0}; 1 for an unknown or closed session too, so that the claim that
--   follows answers with its error.
-- Indexes: uq_worker_sessions_public_id and worker_session_queues' primary key, then
--   session_ready_tasks', then ix_tasks_queue_due and ix_attempts_queue_lease
--   (session_recovery_due).
-- Locks: none (read-only, no transaction). Every read is a SELECT ... INTO: InnoDB takes
--   shared locks on what a SET reads, and a probe that waited on a start or a claim in flight
--   would stall the worker it serves (tests/integration/test_locking_reads.py).
CREATE PROCEDURE session_ready(IN p_namespace_id BIGINT UNSIGNED,
                               IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_state VARCHAR(10);
  DECLARE v_keys TINYINT;
  DECLARE v_free BIGINT;
  DECLARE v_queues INT UNSIGNED;
  DECLARE v_only_queue BIGINT UNSIGNED;
  DECLARE v_ready TINYINT DEFAULT 0;
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  -- The session, its room, and how many queues it has and the least of them (the recovery
  -- probe asks a session's one queue by key, as the claim does), in one read.
  SELECT MIN(s.id), MIN(s.state), MIN(s.concurrency_keys),
         MIN(CAST(s.capacity AS SIGNED) - CAST(s.in_flight AS SIGNED)), COUNT(wq.queue_id),
         MIN(wq.queue_id)
    INTO v_session, v_state, v_keys, v_free, v_queues, v_only_queue
    FROM worker_sessions s LEFT JOIN worker_session_queues wq ON wq.session_id = s.id
   WHERE s.public_id = p_session_public_id AND s.namespace_id = p_namespace_id;
  IF v_session IS NULL OR v_state <> 'OPEN' THEN
    SELECT 1 AS ready;
  ELSE
    IF v_free > 0 THEN
      CALL session_ready_tasks(v_session, v_keys, v_ready);
    END IF;
    -- What the claim recovers, room or not: its own guard's read.
    IF NOT v_ready THEN
      CALL session_recovery_due(v_session, IF(v_queues = 1, v_only_queue, 0), v_now, v_ready);
    END IF;
    SELECT v_ready AS ready;
  END IF;
END
