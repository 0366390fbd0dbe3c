-- session_ready_tasks(session, concurrency_keys, OUT ready): 1 when one of the session's
-- ACTIVE queues has a READY task it may take (an unkeyed one only, without concurrency_keys),
-- else 0; whether the session has room is the caller's to ask. session_ready's probe, and
-- worker_claim's test of a claim that would find nothing.
-- Indexes: worker_session_queues' and queues' primary keys, then ix_tasks_claim, or
--   ix_tasks_queue_lane_key without concurrency_keys (as the claim reads: through
--   ix_tasks_claim it would read every READY keyed row ahead of the unkeyed ones, migration
--   000007).
-- Locks: none. A SELECT ... INTO, a plain read (sql/README.md, "Locking reads"): a READY row
--   another claim holds still says 1, and the claim that follows skips it.
CREATE PROCEDURE session_ready_tasks(IN p_session BIGINT UNSIGNED, IN p_keys TINYINT,
                                     OUT p_ready TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_keys = 1 THEN
    SELECT EXISTS (SELECT 1 FROM worker_session_queues wq
                    STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = wq.queue_id
                    STRAIGHT_JOIN tasks t FORCE INDEX (ix_tasks_claim)
                      ON t.queue_id = wq.queue_id AND t.lane = 'READY'
                   WHERE wq.session_id = p_session AND q.state = 'ACTIVE') INTO p_ready;
  ELSE
    SELECT EXISTS (SELECT 1 FROM worker_session_queues wq
                    STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = wq.queue_id
                    STRAIGHT_JOIN tasks t FORCE INDEX (ix_tasks_queue_lane_key)
                      ON t.queue_id = wq.queue_id AND t.lane = 'READY'
                     AND t.concurrency_key = ''
                   WHERE wq.session_id = p_session AND q.state = 'ACTIVE') INTO p_ready;
  END IF;
END
