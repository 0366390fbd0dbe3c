-- worker_hello: register or resume a worker session (W1).
-- Params: namespace, application, stable worker identity, capacity, concurrency_keys flag,
--   JSON array of public queue ids (the HTTP shell scope-checks them first), registration
--   fingerprint.
-- Result sets: 1) {session_id, lease_seconds, concurrency_keys, capacity, state};
--   2) the in-flight attempts as task.assign rows, with their original tokens.
-- Errors: STATE_CONFLICT when the identity said hello before with another concurrency_keys
--   value (the flag is a fixed property of the identity; a new process uses a new identity),
--   NOT_FOUND when a queue id is not a queue of the namespace.
-- Locks, in order: applications row, worker_sessions row.
CREATE PROCEDURE worker_hello(
  IN p_namespace_id BIGINT UNSIGNED, IN p_application_id BIGINT UNSIGNED,
  IN p_worker_id VARCHAR(191), IN p_capacity INT UNSIGNED, IN p_concurrency_keys TINYINT,
  IN p_queue_ids TEXT, IN p_registration CHAR(64) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_flag TINYINT;
  DECLARE v_wanted INT;
  DECLARE v_found INT;
  DECLARE v_now DATETIME(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = p_application_id FOR UPDATE;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);

  SELECT id, concurrency_keys INTO v_session, v_flag
    FROM worker_sessions WHERE namespace_id = p_namespace_id AND worker_id = p_worker_id
     FOR UPDATE;
  IF v_session IS NULL THEN
    INSERT INTO worker_sessions (public_id, namespace_id, application_id, worker_id, capacity,
                                 concurrency_keys, state, registration_sha256, created_at,
                                 last_seen_at)
      VALUES (new_public_id(), p_namespace_id, p_application_id, p_worker_id, p_capacity,
              p_concurrency_keys, 'OPEN', p_registration, v_now, v_now);
    SET v_session = LAST_INSERT_ID();
  ELSEIF v_flag <> p_concurrency_keys THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT =
      'STATE_CONFLICT: concurrency_keys is fixed for a worker identity; use a new worker_id';
  ELSE
    UPDATE worker_sessions
       SET capacity = p_capacity, state = 'OPEN', registration_sha256 = p_registration,
           last_seen_at = v_now, closed_at = NULL
     WHERE id = v_session;
    DELETE FROM worker_session_queues WHERE session_id = v_session;
  END IF;

  SELECT COUNT(DISTINCT j.qid), COUNT(DISTINCT q.id) INTO v_wanted, v_found
    FROM JSON_TABLE(p_queue_ids, '$[*]' COLUMNS (qid CHAR(32) CHARACTER SET ascii PATH '$')) j
    LEFT JOIN queues q ON q.public_id = j.qid AND q.namespace_id = p_namespace_id;
  IF v_wanted = 0 OR v_wanted <> v_found THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
  END IF;
  INSERT INTO worker_session_queues (session_id, queue_id)
    SELECT DISTINCT v_session, q.id
      FROM JSON_TABLE(p_queue_ids, '$[*]' COLUMNS (qid CHAR(32) CHARACTER SET ascii PATH '$')) j
      JOIN queues q ON q.public_id = j.qid AND q.namespace_id = p_namespace_id;
  COMMIT;

  SELECT s.public_id AS session_id, s.capacity, s.concurrency_keys, s.state,
         (SELECT MIN(q.lease_seconds) FROM worker_session_queues wq
            JOIN queues q ON q.id = wq.queue_id WHERE wq.session_id = s.id) AS lease_seconds
    FROM worker_sessions s WHERE s.id = v_session;
  CALL session_assignments(v_session, 0);
END
