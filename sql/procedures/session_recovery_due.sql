-- session_recovery_due(session, now): 1 when a queue of the session has something a claim
-- recovers (an expired lease, LEASED or RUNNING, or a DELAYED task whose backoff has run
-- out), else 0. Read without locks. worker_claim asks it before walking its queues for
-- recovery; session_ready asks it so that the probe says yes for the same work.
-- Per queue it reads the earliest lease of each state and the earliest due backoff, one
-- index entry each (ix_attempts_queue_lease, ix_tasks_queue_due, ORDER BY ... LIMIT 1).
-- Written as a join with `state IN ('LEASED', 'RUNNING') AND lease_expires_at <= now`, the
-- index was entered by queue alone and the read went through every attempt the queue ever
-- had (an IN list is not an equality: sql/README.md, "Hot queries and their indexes").
CREATE FUNCTION session_recovery_due(p_session BIGINT UNSIGNED, p_now DATETIME(6)) RETURNS TINYINT
  READS SQL DATA SQL SECURITY DEFINER
  RETURN EXISTS (SELECT 1 FROM worker_session_queues wq
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
