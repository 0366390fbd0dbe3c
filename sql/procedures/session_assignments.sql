-- session_assignments: the task.assign rows of a session's in-flight attempts with
-- p_min_attempt_id <= attempts.id <= p_max_attempt_id (a claim passes its first new attempt id
-- and the greatest id; hello one page of them).
-- Read-only helper; result set columns are what the shell turns into task.assign (W2, W7),
-- and no more: each column costs every claim's client a descriptor and a field to parse.
-- Index: ix_attempts_session (session_id, state), then each row's task and queue by primary
-- key: the join order and indexes are fixed (sql/README.md, "Plans that do not depend on
-- statistics"), or a stale row estimate for attempts makes the optimizer start from tasks.
-- A claim that granted nothing passes the greatest id as its first: that range holds no
-- attempt, and its answer is an empty result set of one column, read from no table. The
-- columns above are what a client parses even for no row (17 field descriptors: 81 against 32
-- microseconds of mariadbd a call, 99 against 46 of the client's), and a long poll begins
-- with such a claim whenever work is sparse.
CREATE PROCEDURE session_assignments(IN p_session_id BIGINT UNSIGNED,
                                     IN p_min_attempt_id BIGINT UNSIGNED,
                                     IN p_max_attempt_id BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_min_attempt_id = 18446744073709551615 THEN
    SELECT NULL AS attempt_id FROM DUAL WHERE FALSE;
  ELSE
    SELECT a.public_id AS attempt_id, a.attempt_number, a.concurrency_token, a.concurrency_slot,
           a.lease_expires_at,
           t.public_id AS task_id, q.public_id AS queue_id, t.handler, t.handler_version,
           t.payload_version, t.payload, t.business_key, t.concurrency_key, t.priority,
           t.max_attempts, t.deadline_at, t.created_at
      FROM attempts a FORCE INDEX (ix_attempts_session)
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
      STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = t.queue_id
     WHERE a.session_id = p_session_id AND a.state IN ('LEASED', 'RUNNING')
       AND a.id BETWEEN p_min_attempt_id AND p_max_attempt_id
     ORDER BY a.id;
  END IF;
END
