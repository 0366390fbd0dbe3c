-- attempt_result_many: attempt_result for up to 100 attempts of one session in ONE transaction
-- (POST /v1/attempts/result). Each item keeps its own outcome: an item that fails (NOT_FOUND,
-- LEASE_LOST, STATE_CONFLICT) is rolled back to its savepoint and answered with its error; the
-- others commit. An item repeated with the same result is a duplicate, as in attempt_result.
-- Params: namespace, session public id, items as a JSON array of objects {attempt_id, outcome,
--   retryable (0/1), result, error}, where result and error are the canonical JSON text (a JSON
--   string) or null, exactly what attempt_result receives (validated by the shell).
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL),
--   attempt_id, task_id, duplicate.
-- Locks: per item, in order, those of attempt_result_one (the applications row first, held to
-- the end). Deadlocks and lock-wait timeouts are not item errors: they roll back the whole batch
-- (outer handler) and the shell retries it.
CREATE PROCEDURE attempt_result_many(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                     IN p_items MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_at VARCHAR(20);
  DECLARE v_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_duplicate TINYINT;
  DECLARE v_error VARCHAR(512);
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The session is resolved once for the batch (NULL: every item is LEASE_LOST).
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  SET v_n = JSON_LENGTH(p_items);
  WHILE v_i < v_n DO
    SET v_at = CONCAT('$[', v_i, ']');
    SET v_id = JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.attempt_id')));
    SET v_task = NULL, v_duplicate = NULL, v_error = NULL;
    SAVEPOINT batch_item;
    item: BEGIN
      DECLARE EXIT HANDLER FOR SQLSTATE '45000'
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
        ROLLBACK TO SAVEPOINT batch_item;
      END;
      CALL attempt_result_one(
        p_namespace_id, v_session, p_session_public_id, v_id,
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.outcome'))),
        JSON_EXTRACT(p_items, CONCAT(v_at, '.retryable')),
        IF(JSON_TYPE(JSON_EXTRACT(p_items, CONCAT(v_at, '.result'))) = 'NULL', NULL,
           JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.result')))),
        IF(JSON_TYPE(JSON_EXTRACT(p_items, CONCAT(v_at, '.error'))) = 'NULL', NULL,
           JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.error')))),
        v_task, v_duplicate);
    END item;
    SET v_out = JSON_ARRAY_APPEND(v_out, '$',
                  JSON_OBJECT('seq', v_i, 'attempt_id', v_id, 'task', COALESCE(v_task, 0),
                              'duplicate', COALESCE(v_duplicate, 0), 'error', COALESCE(v_error, '')));
    SET v_i = v_i + 1;
  END WHILE;
  COMMIT;
  SELECT j.seq, NULLIF(j.error, '') AS item_error, j.attempt_id, t.public_id AS task_id, j.duplicate
    FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                           attempt_id CHAR(32) PATH '$.attempt_id',
                                           task BIGINT UNSIGNED PATH '$.task',
                                           duplicate TINYINT PATH '$.duplicate',
                                           error VARCHAR(512) PATH '$.error')) j
    LEFT JOIN tasks t ON t.id = j.task
   ORDER BY j.seq;
END
