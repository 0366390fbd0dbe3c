-- session_recovery_due(session, now, OUT due): 1 when a queue of the session has something a
-- claim recovers (an expired lease, LEASED or RUNNING, or a DELAYED task whose backoff has run
-- out), else 0. worker_claim asks it before walking its queues for recovery; session_ready asks
-- it so that the probe says yes for the same work.
-- Per queue of the session (in id order, stopping at the first that has some), one statement
-- asks whether an index entry lies in the range (queue, state, up to now] of
-- ix_attempts_queue_lease for each state, or (queue, 'DELAYED', up to now] of
-- ix_tasks_queue_due. The queue is a constant of the statement, so `<= now` bounds a range;
-- correlated with the session's queues in one statement, the index was entered by (queue,
-- state) alone and the bound tested row by row. That read stepped over the entries an attempt
-- leaves behind when it moves on (LEASED to RUNNING at start, RUNNING to an end at its
-- result): they stay in the index, delete-marked, until purge removes them, and carry leases
-- still ahead, so a busy queue's claim read as many as purge had not yet removed (0.58-0.72
-- ms a claim in a worker's rounds against 0.39-0.46 for the loop, bench/README.md, session
-- 12). An IN list over the states would not bound it either (an IN list is not an equality:
-- sql/README.md, "Hot queries and their indexes").
-- Locks: none. A procedure whose SELECT ... INTO is a plain read, not a function: InnoDB takes
-- shared locks on what any statement but a SELECT reads, READ COMMITTED or not, so a function
-- called from the claim's SET held its rows to the claim's commit and deadlocked with batch
-- starts (sql/README.md, "Locking reads").
CREATE PROCEDURE session_recovery_due(IN p_session BIGINT UNSIGNED, IN p_now DATETIME(6),
                                      OUT p_due TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  SET p_due = 0;
  queues: LOOP
    SELECT MIN(queue_id) INTO v_next FROM worker_session_queues
     WHERE session_id = p_session AND queue_id > v_queue;
    IF v_next IS NULL THEN LEAVE queues; END IF;
    SET v_queue = v_next;
    SELECT EXISTS (SELECT 1 FROM attempts FORCE INDEX (ix_attempts_queue_lease)
                    WHERE queue_id = v_queue AND state = 'LEASED' AND lease_expires_at <= p_now)
        OR EXISTS (SELECT 1 FROM attempts FORCE INDEX (ix_attempts_queue_lease)
                    WHERE queue_id = v_queue AND state = 'RUNNING' AND lease_expires_at <= p_now)
        OR EXISTS (SELECT 1 FROM tasks FORCE INDEX (ix_tasks_queue_due)
                    WHERE queue_id = v_queue AND lane = 'DELAYED' AND available_at <= p_now)
      INTO p_due;
    IF p_due THEN LEAVE queues; END IF;
  END LOOP;
END
