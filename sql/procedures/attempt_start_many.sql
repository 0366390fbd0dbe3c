-- attempt_start_many: attempt_start for up to 100 attempts of one session in ONE transaction
-- (POST /v1/attempts/start). Each item keeps its own outcome: an item that fails (NOT_FOUND,
-- LEASE_LOST) is rolled back to its savepoint and answered with its error; the others commit.
-- Params: namespace, session public id, attempt public ids as a JSON array of strings
--   (validated by the shell).
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL), then the
--   attempt_detail columns (NULL on error).
-- Locks: per item, in order, those of attempt_start_one. Deadlocks and lock-wait timeouts are
-- not item errors: they roll back the whole batch (outer handler) and the shell retries it.
-- JSON_TABLE and GET DIAGNOSTICS exist in MySQL 8.0 and MariaDB 10.6 alike.
CREATE PROCEDURE attempt_start_many(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                    IN p_attempt_ids MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_attempt BIGINT UNSIGNED;
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_error VARCHAR(512);
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The session is resolved once for the batch (NULL: every item is LEASE_LOST).
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  SET v_n = JSON_LENGTH(p_attempt_ids);
  WHILE v_i < v_n DO
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
  END WHILE;
  COMMIT;
  SELECT j.seq, NULLIF(j.error, '') AS item_error,
         a.public_id AS attempt_id, t.public_id AS task_id, a.attempt_number, a.state,
         a.concurrency_token, t.concurrency_key, a.lease_expires_at, a.created_at,
         a.started_at, a.finished_at, a.outcome, a.retryable, a.result, a.error
    FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                           id BIGINT UNSIGNED PATH '$.id',
                                           error VARCHAR(512) PATH '$.error')) j
    LEFT JOIN attempts a ON a.id = j.id
    LEFT JOIN tasks t ON t.id = a.task_id
   ORDER BY j.seq;
END
