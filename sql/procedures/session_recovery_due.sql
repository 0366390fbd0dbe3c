-- session_recovery_due(session, only queue, now, OUT due): 1 when a queue of the session has
-- something a claim recovers (an expired lease, LEASED or RUNNING, or a DELAYED task whose
-- backoff has run out), else 0. worker_claim asks it before walking its queues for recovery;
-- session_ready asks it so that the probe says yes for the same work.
-- A caller that knows the session has one queue passes it (p_only_queue; 0: walk the
-- session's queues): one statement where the walk takes three, two of them finding the queue
-- and finding no other (the claim of a worker on one queue, every round).
-- The session's first four queues (in id order, stopping at the first that has some) are
-- asked one statement each: whether an index entry lies in the range (queue, state, up to
-- now] of ix_attempts_queue_lease for each state, or (queue, 'DELAYED', up to now] of
-- ix_tasks_queue_due. The queue is a constant of the statement, so `<= now` bounds a range.
-- Correlated with the session's queues, the index is entered by (queue, state) alone (MariaDB
-- has no range per outer row in a subquery, nor LATERAL): read in lease order, the first entry
-- answers, but only after every entry an attempt left behind when it moved on (LEASED to
-- RUNNING at start, RUNNING to an end at its result), which stays in the index delete-marked
-- until purge removes it, with its lease still ahead. A busy queue's claim read as many of
-- those as purge had not yet removed: 0.58-0.72 ms a claim in a worker's rounds against
-- 0.39-0.46 asked per queue (bench/README.md). A session's further queues, rare,
-- are asked in that one correlated statement: one statement per queue made the probe of a
-- session of 100 idle queues take 17.5 ms against 2.0 (3.0 this way), every 20-250 ms of a
-- long poll.
-- An IN list over the states would bound nothing either (an IN list is not an equality:
-- sql/README.md, "Hot queries and their indexes").
-- Locks: none. A procedure whose SELECT ... INTO is a plain read, not a function: InnoDB takes
-- shared locks on what any statement but a SELECT reads, READ COMMITTED or not, so a function
-- called from the claim's SET held its rows to the claim's commit and deadlocked with batch
-- starts (sql/README.md, "Locking reads").
CREATE PROCEDURE session_recovery_due(IN p_session BIGINT UNSIGNED,
                                      IN p_only_queue BIGINT UNSIGNED, IN p_now DATETIME(6),
                                      OUT p_due TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_asked INT DEFAULT 0;
  SET p_due = 0;
  queues: LOOP
    IF p_only_queue = 0 THEN
      SELECT MIN(queue_id) INTO v_next FROM worker_session_queues
       WHERE session_id = p_session AND queue_id > v_queue;
    ELSE  -- the one queue, then none
      SET v_next = IF(v_asked = 0, p_only_queue, NULL);
    END IF;
    IF v_next IS NULL THEN LEAVE queues; END IF;
    IF v_asked = 4 THEN
      SELECT EXISTS (SELECT 1 FROM worker_session_queues wq
                      WHERE wq.session_id = p_session AND wq.queue_id >= v_next
                        AND ((SELECT a.lease_expires_at FROM attempts a FORCE INDEX (ix_attempts_queue_lease)
                               WHERE a.queue_id = wq.queue_id AND a.state = 'LEASED'
                               ORDER BY a.lease_expires_at LIMIT 1) <= p_now
                          OR (SELECT a.lease_expires_at FROM attempts a FORCE INDEX (ix_attempts_queue_lease)
                               WHERE a.queue_id = wq.queue_id AND a.state = 'RUNNING'
                               ORDER BY a.lease_expires_at LIMIT 1) <= p_now
                          OR (SELECT t.available_at FROM tasks t FORCE INDEX (ix_tasks_queue_due)
                               WHERE t.queue_id = wq.queue_id AND t.lane = 'DELAYED'
                               ORDER BY t.available_at LIMIT 1) <= p_now))
        INTO p_due;
      LEAVE queues;
    END IF;
    SET v_queue = v_next, v_asked = v_asked + 1;
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
