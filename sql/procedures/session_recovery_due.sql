-- session_recovery_due(session, now, OUT due): 1 when a queue of the session has something a
-- claim recovers (an expired lease, LEASED or RUNNING, or a DELAYED task whose backoff has run
-- out), else 0. worker_claim asks it before walking its queues for recovery; session_ready asks
-- it so that the probe says yes for the same work.
-- Per queue it reads the earliest lease of each state and the earliest due backoff, one index
-- entry each (ix_attempts_queue_lease, ix_tasks_queue_due, ORDER BY ... LIMIT 1). Written as a
-- join with `state IN ('LEASED', 'RUNNING') AND lease_expires_at <= now`, the index was entered
-- by queue alone and the read went through every attempt the queue ever had (an IN list is not
-- an equality: sql/README.md, "Hot queries and their indexes").
-- Locks: none. A procedure whose SELECT ... INTO is a plain read, not a function: InnoDB takes
-- shared locks on what any statement but a SELECT reads, READ COMMITTED or not, so a function
-- called from the claim's SET held its rows to the claim's commit and deadlocked with batch
-- starts (sql/README.md, "Locking reads").
CREATE PROCEDURE session_recovery_due(IN p_session BIGINT UNSIGNED, IN p_now DATETIME(6),
                                      OUT p_due TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
  SELECT EXISTS (SELECT 1 FROM worker_session_queues wq
                  WHERE wq.session_id = p_session
                    AND ((SELECT a.lease_expires_at FROM attempts a FORCE INDEX (ix_attempts_queue_lease)
                           WHERE a.queue_id = wq.queue_id AND a.state = 'LEASED'
                           ORDER BY a.lease_expires_at LIMIT 1) <= p_now
                      OR (SELECT a.lease_expires_at FROM attempts a FORCE INDEX (ix_attempts_queue_lease)
                           WHERE a.queue_id = wq.queue_id AND a.state = 'RUNNING'
                           ORDER BY a.lease_expires_at LIMIT 1) <= p_now
                      OR (SELECT t.available_at FROM tasks t FORCE INDEX (ix_tasks_queue_due)
                           WHERE t.queue_id = wq.queue_id AND t.lane = 'DELAYED'
                           ORDER BY t.available_at LIMIT 1) <= p_now))
    INTO p_due
