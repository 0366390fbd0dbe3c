-- task_submit_many: task_submit for up to 100 tasks of one namespace in ONE transaction
-- (POST /v1/tasks/batch). Each item keeps its own idempotency and outcome: an item that fails
-- (NOT_FOUND, IDEMPOTENCY_CONFLICT, QUOTA_EXCEEDED) is rolled back to its savepoint and answered
-- with its error; the others commit. A key repeated inside the batch finds the earlier item's
-- record, as a second submission would.
-- Params: namespace, actor, items as a JSON array of objects {queue (internal id, scope-checked
--   by the shell), idempotency_key, fingerprint, handler, handler_version, payload_version,
--   payload (the stored JSON text, as a JSON string), business_key, concurrency_key, priority,
--   max_attempts (or null), deadline_seconds (or null)}.
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL), task_id
--   (public), created.
-- Locks: per item, in order, those of task_submit_one (the applications row first, held to the
-- end). Deadlocks and lock-wait timeouts roll back the whole batch; the shell retries it.
CREATE PROCEDURE task_submit_many(IN p_namespace_id BIGINT UNSIGNED, IN p_actor VARCHAR(200),
                                  IN p_items MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_at VARCHAR(20);
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_created TINYINT;
  DECLARE v_error VARCHAR(512);
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SET v_n = JSON_LENGTH(p_items);
  WHILE v_i < v_n DO
    SET v_at = CONCAT('$[', v_i, ']');
    SET v_task = NULL, v_created = NULL, v_error = NULL;
    SAVEPOINT batch_item;
    item: BEGIN
      DECLARE EXIT HANDLER FOR SQLSTATE '45000'
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
        ROLLBACK TO SAVEPOINT batch_item;
      END;
      CALL task_submit_one(
        p_namespace_id,
        JSON_EXTRACT(p_items, CONCAT(v_at, '.queue')),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.idempotency_key'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.fingerprint'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.handler'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.handler_version'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.payload_version'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.payload'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.business_key'))),
        JSON_UNQUOTE(JSON_EXTRACT(p_items, CONCAT(v_at, '.concurrency_key'))),
        JSON_EXTRACT(p_items, CONCAT(v_at, '.priority')),
        IF(JSON_TYPE(JSON_EXTRACT(p_items, CONCAT(v_at, '.max_attempts'))) = 'NULL', NULL,
           JSON_EXTRACT(p_items, CONCAT(v_at, '.max_attempts'))),
        IF(JSON_TYPE(JSON_EXTRACT(p_items, CONCAT(v_at, '.deadline_seconds'))) = 'NULL', NULL,
           JSON_EXTRACT(p_items, CONCAT(v_at, '.deadline_seconds'))),
        p_actor, NULL, NULL, NULL, v_task, v_created);
    END item;
    SET v_out = JSON_ARRAY_APPEND(v_out, '$',
                  JSON_OBJECT('seq', v_i, 'task', COALESCE(v_task, 0), 'created', COALESCE(v_created, 0),
                              'error', COALESCE(v_error, '')));
    SET v_i = v_i + 1;
  END WHILE;
  COMMIT;
  SELECT j.seq, NULLIF(j.error, '') AS item_error, t.public_id AS task_id, j.created
    FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                           task BIGINT UNSIGNED PATH '$.task',
                                           created TINYINT PATH '$.created',
                                           error VARCHAR(512) PATH '$.error')) j
    LEFT JOIN tasks t ON t.id = j.task
   ORDER BY j.seq;
END
