-- attempt_start_many: attempt_start for up to 100 attempts of one session in ONE transaction
-- (POST /v1/attempts/start). Each item keeps its own outcome: an item that fails (NOT_FOUND,
-- LEASE_LOST) is rolled back to its savepoint and answered with its error; the others commit.
-- Params: namespace, session public id, attempt public ids as a JSON array of strings
--   (validated by the shell), brief (1: answer started or not only).
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL), then,
--   unless brief, the attempt_detail columns (NULL on error). An item without an error is
--   RUNNING, so a caller that only runs what started (the SDK worker) asks brief: the full
--   answer's reads, and its 14 columns an item for the caller to parse, were 7-8% of a drain
--   of a worker without prefetch (bench/README.md).
--
-- Two paths with one outcome. The common item, a LEASED attempt of this session whose lease
-- has not expired, named once in the batch, is started set-based (attempt and task RUNNING,
-- one STARTED history row each): a statement per step for the group instead of ~5 per item.
-- Every other item goes through attempt_start_one in order behind its savepoint.
-- Locks: the items' attempts rows, then their tasks rows, in one locking read before the group
-- is written, so a deadlock meets the batch while InnoDB may still pick it as the victim
-- (sql/README.md, "Set-based paths"); then per remaining item those of attempt_start_one.
-- Deadlocks and lock-wait timeouts are not item errors: they roll back the whole batch (outer
-- handler) and the shell retries it.
-- JSON_TABLE, JSON_ARRAYAGG and GET DIAGNOSTICS exist in MySQL 8.0 and MariaDB 10.6 alike.
CREATE PROCEDURE attempt_start_many(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                    IN p_attempt_ids MEDIUMTEXT, IN p_brief TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_attempt BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_error VARCHAR(512);
  DECLARE v_fast INT DEFAULT 0;
  DECLARE v_fast_seqs TEXT DEFAULT '';
  DECLARE v_ignored BIGINT;
  DECLARE v_now DATETIME(6);
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  -- The group's temporary table, before the transaction (sql/README.md, "Set-based paths").
  CREATE TEMPORARY TABLE IF NOT EXISTS start_fast_mem (
    seq INT NOT NULL PRIMARY KEY, attempt_id BIGINT UNSIGNED NOT NULL,
    task_id BIGINT UNSIGNED NOT NULL, token BIGINT UNSIGNED NOT NULL
  ) ENGINE=MEMORY;
  DELETE FROM start_fast_mem;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The session is resolved once for the batch (NULL: every item is LEASE_LOST).
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  IF v_session IS NOT NULL THEN
    SELECT COUNT(*) INTO v_ignored
      FROM JSON_TABLE(p_attempt_ids, '$[*]' COLUMNS (
             id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) j
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.id AND a.namespace_id = p_namespace_id
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
       FOR UPDATE;
    -- The clock is read after the locks: a call that waited must not stamp times earlier than
    -- the change it waited for.
    SET v_now = UTC_TIMESTAMP(6);
    INSERT INTO start_fast_mem (seq, attempt_id, task_id, token)
    SELECT j.seq - 1, a.id, a.task_id, a.concurrency_token
      FROM JSON_TABLE(p_attempt_ids, '$[*]' COLUMNS (
             seq FOR ORDINALITY, id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) j
      -- Attempts named once in the batch: a derived table, read once.
      STRAIGHT_JOIN (SELECT id FROM JSON_TABLE(p_attempt_ids, '$[*]' COLUMNS (
              id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) o
             GROUP BY id HAVING COUNT(*) = 1) once ON once.id = j.id
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.id AND a.namespace_id = p_namespace_id
     WHERE a.session_id = v_session AND a.state = 'LEASED' AND a.lease_expires_at > v_now;
    SET v_fast = ROW_COUNT();
  END IF;
  IF v_fast > 0 THEN
    -- From the group's rows to the tables (STRAIGHT_JOIN): a temporary table has no statistics.
    UPDATE start_fast_mem f STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = f.attempt_id
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
       SET a.state = 'RUNNING', a.started_at = v_now, t.state = 'RUNNING', t.updated_at = v_now;
    INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                              from_state, to_state, actor, details, created_at)
    SELECT task_id, p_namespace_id, attempt_id, NULLIF(token, 0), 'STARTED', 'LEASED', 'RUNNING',
           CONCAT('session:', p_session_public_id), NULL, v_now
      FROM start_fast_mem ORDER BY seq;
  END IF;

  SET v_n = JSON_LENGTH(p_attempt_ids);
  -- The group's answer rows, but for a brief answer of a batch the group holds whole (the
  -- worker's start): that answer reads the group itself.
  IF v_fast > 0 AND NOT (v_fast = v_n AND p_brief) THEN
    SELECT GROUP_CONCAT(seq), JSON_ARRAYAGG(JSON_OBJECT('seq', seq, 'id', attempt_id, 'error', ''))
      INTO v_fast_seqs, v_out FROM start_fast_mem;
  END IF;
  batch_items: WHILE v_i < v_n AND v_fast < v_n DO  -- nothing left when the group holds every item
    IF v_fast > 0 AND FIND_IN_SET(v_i, v_fast_seqs) > 0 THEN
      SET v_i = v_i + 1;
      ITERATE batch_items;
    END IF;
    SET v_id = JSON_UNQUOTE(JSON_EXTRACT(p_attempt_ids, CONCAT('$[', v_i, ']')));
    SET v_attempt = NULL, v_error = NULL;
    SAVEPOINT batch_item;
    item: BEGIN
      DECLARE EXIT HANDLER FOR SQLSTATE '45000'
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
        ROLLBACK TO SAVEPOINT batch_item;
      END;
      CALL attempt_start_one(p_namespace_id, v_session, p_session_public_id, v_id, v_attempt);
    END item;
    SET v_out = JSON_ARRAY_APPEND(v_out, '$', JSON_OBJECT('seq', v_i, 'id', COALESCE(v_attempt, 0),
                                                  'error', COALESCE(v_error, '')));
    SET v_i = v_i + 1;
  END WHILE batch_items;
  COMMIT;
  IF v_fast = v_n AND p_brief THEN
    SELECT seq, NULL AS item_error FROM start_fast_mem ORDER BY seq;
  ELSEIF p_brief THEN
    SELECT j.seq, NULLIF(j.error, '') AS item_error
      FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                             error VARCHAR(512) PATH '$.error')) j
     ORDER BY j.seq;
  ELSE
    SELECT j.seq, NULLIF(j.error, '') AS item_error,
           a.public_id AS attempt_id, t.public_id AS task_id, a.attempt_number, a.state,
           a.concurrency_token, a.concurrency_slot, t.concurrency_key, a.lease_expires_at, a.created_at,
           a.started_at, a.finished_at, a.outcome, a.retryable, a.result, a.error
      FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                             id BIGINT UNSIGNED PATH '$.id',
                                             error VARCHAR(512) PATH '$.error')) j
      LEFT JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = j.id
      LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = a.task_id
     ORDER BY j.seq;
  END IF;
END
