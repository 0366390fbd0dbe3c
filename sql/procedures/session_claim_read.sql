-- session_claim_read: what a claim of a session asks first, in one plain read: the session,
-- its room, its queues (how many, the least: for the recovery probe) and whether one of its
-- ACTIVE queues has a READY task it may take (an unkeyed one only, without concurrency_keys).
-- worker_claim reads it to answer a claim that would find nothing without its transaction,
-- session_ready to answer the long poll's probe.
-- Params: namespace, session public id. Out: the session's internal id (NULL: unknown), its
--   application, how many queues it has, the least of them, its state, capacity less
--   in_flight, ready (1 or 0, whatever its room), and 1 when it was seen in the last second
--   (last_seen_at), else 0.
-- Indexes: uq_worker_sessions_public_id, worker_session_queues' and queues' primary keys, then
--   per queue ix_tasks_claim, or ix_tasks_queue_lane_key without concurrency_keys (as the
--   claim reads: through ix_tasks_claim it would read every READY keyed row ahead of the
--   unkeyed ones, migration 000007).
-- Locks: none. A SELECT ... INTO, a plain read (sql/README.md, "Locking reads"): a READY row
--   another claim holds still says 1, and the claim that follows skips it.
CREATE PROCEDURE session_claim_read(IN p_namespace_id BIGINT UNSIGNED,
                                    IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                    OUT p_session BIGINT UNSIGNED, OUT p_app BIGINT UNSIGNED,
                                    OUT p_queues INT UNSIGNED, OUT p_only_queue BIGINT UNSIGNED,
                                    OUT p_state VARCHAR(10), OUT p_free BIGINT, OUT p_ready TINYINT,
                                    OUT p_recent TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  SELECT MIN(s.id), MIN(s.application_id), COUNT(wq.queue_id), MIN(wq.queue_id), MIN(s.state),
         MIN(CAST(s.capacity AS SIGNED) - CAST(s.in_flight AS SIGNED)),
         COALESCE(MAX(q.state = 'ACTIVE' AND IF(s.concurrency_keys = 1,
           EXISTS (SELECT 1 FROM tasks t FORCE INDEX (ix_tasks_claim)
                    WHERE t.queue_id = wq.queue_id AND t.lane = 'READY'),
           EXISTS (SELECT 1 FROM tasks t FORCE INDEX (ix_tasks_queue_lane_key)
                    WHERE t.queue_id = wq.queue_id AND t.lane = 'READY' AND t.concurrency_key = ''))), 0),
         COALESCE(MIN(s.last_seen_at) >= UTC_TIMESTAMP(6) - INTERVAL 1 SECOND, 0)
    INTO p_session, p_app, p_queues, p_only_queue, p_state, p_free, p_ready, p_recent
    FROM worker_sessions s
    LEFT JOIN worker_session_queues wq FORCE INDEX (PRIMARY) ON wq.session_id = s.id
    LEFT JOIN queues q FORCE INDEX (PRIMARY) ON q.id = wq.queue_id
   WHERE s.public_id = p_session_public_id AND s.namespace_id = p_namespace_id;
END
