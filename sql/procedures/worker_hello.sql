-- worker_hello: register or resume a worker session (W1).
-- Params: namespace, application, stable worker identity, capacity, concurrency_keys flag,
--   JSON array of public queue ids (the HTTP shell scope-checks them first), registration
--   fingerprint, and in_flight_after: NULL for the first page of the in-flight attempts, else
--   the in_flight_after the previous page answered (an attempt of this session).
-- Result sets: 1) {session_id, lease_seconds, concurrency_keys, capacity, state,
--   in_flight_after (NULL: this page ends the session's in-flight attempts; else the attempt
--   to page on from)}; 2) one page of the in-flight attempts as task.assign rows, with their
--   original tokens, in attempt order after in_flight_after.
-- Pages (L1): a page's payloads together stay within 1 MiB, the request body's bound, its
-- first attempt's whatever its size; a session of capacity 1,000 could hold a gigabyte, which
-- one server worker would build into one answer while every other request it served waited.
-- Attempts granted or finished between pages are in a later page or in none, by attempt id.
-- Errors: STATE_CONFLICT when the identity said hello before with another concurrency_keys
--   value (the flag is a fixed property of the identity; a new process uses a new identity),
--   NOT_FOUND when a queue id is not a queue of the namespace or in_flight_after is not an
--   attempt of this session; nothing is changed then.
-- Locks, in order: applications row, worker_sessions row.
CREATE PROCEDURE worker_hello(
  IN p_namespace_id BIGINT UNSIGNED, IN p_application_id BIGINT UNSIGNED,
  IN p_worker_id VARCHAR(191), IN p_capacity INT UNSIGNED, IN p_concurrency_keys TINYINT,
  IN p_queue_ids TEXT, IN p_registration CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_in_flight_after CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_flag TINYINT;
  DECLARE v_wanted INT;
  DECLARE v_found INT;
  DECLARE v_now DATETIME(6);
  DECLARE v_after BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_last BIGINT UNSIGNED;
  DECLARE v_max BIGINT UNSIGNED;
  DECLARE c_payload_budget INT UNSIGNED DEFAULT 1048576;  -- validation.MAX_BODY_BYTES
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

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
  IF p_in_flight_after IS NOT NULL THEN
    SELECT MIN(id) INTO v_after FROM attempts
     WHERE public_id = p_in_flight_after AND session_id = v_session;
    IF v_after IS NULL THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: in_flight_after is not an attempt of this session';
    END IF;
  END IF;
  COMMIT;

  -- The page: the in-flight attempts after the cursor whose payloads, added up in attempt
  -- order, stay within the budget (the first whatever its size). A read without locks, as
  -- session_assignments' own.
  SELECT MAX(IF(w.n = 1 OR w.total <= c_payload_budget, w.id, NULL)), MAX(w.id)
    INTO v_last, v_max
    FROM (SELECT a.id, ROW_NUMBER() OVER (ORDER BY a.id) AS n,
                 SUM(COALESCE(t.payload_bytes, LENGTH(t.payload))) OVER (ORDER BY a.id) AS total
            FROM attempts a FORCE INDEX (ix_attempts_session)
            STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
           WHERE a.session_id = v_session AND a.state IN ('LEASED', 'RUNNING') AND a.id > v_after) w;

  SELECT s.public_id AS session_id, s.capacity, s.concurrency_keys, s.state,
         (SELECT MIN(q.lease_seconds) FROM worker_session_queues wq
            JOIN queues q ON q.id = wq.queue_id WHERE wq.session_id = s.id) AS lease_seconds,
         IF(v_last < v_max, (SELECT public_id FROM attempts WHERE id = v_last), NULL) AS in_flight_after
    FROM worker_sessions s WHERE s.id = v_session;
  CALL session_assignments(v_session, v_after + 1, COALESCE(v_last, 0));
END
