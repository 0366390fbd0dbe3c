-- task_submit: accept a task (POST /v1/tasks, schedule fires); the rules are task_submit_one's.
-- Params: namespace, queue (internal id, already scope-checked by the shell), Idempotency-Key,
--   fingerprint (SHA-256 of the normalised request), task fields, deadline in seconds (NULL =
--   none), actor, and the schedule origin (NULLs for API submissions).
-- Result set: {task_id (public), created (1 first acceptance, 0 replay)}, then the task's
--   detail: the columns of orbit_shell.server.scoped.TASK_COLUMNS, so POST /v1/tasks answers without
--   reading the task again (that read was 18% of the request in-process).
-- Errors: NOT_FOUND (queue not in namespace), IDEMPOTENCY_CONFLICT (same key, other content),
--   QUOTA_EXCEEDED (application or queue unfinished quota).
-- Locks: a gate of the namespace (namespace_gate), then those of task_submit_one.
-- A concurrent submission of the same Idempotency-Key makes this one's insert of the record a
-- duplicate (1062) once the other commits: it is rolled back and answered as a deadlock
-- (1213), which the shell retries whole, and the retry finds the record and answers as a
-- replay (200) or IDEMPOTENCY_CONFLICT.
CREATE PROCEDURE task_submit(
  IN p_namespace_id BIGINT UNSIGNED, IN p_queue_id BIGINT UNSIGNED,
  IN p_idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin, IN p_fingerprint CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_handler VARCHAR(200), IN p_handler_version VARCHAR(64), IN p_payload_version VARCHAR(64),
  IN p_payload MEDIUMTEXT, IN p_business_key VARCHAR(191), IN p_concurrency_key VARCHAR(191),
  IN p_priority TINYINT UNSIGNED, IN p_max_attempts INT UNSIGNED, IN p_deadline_seconds INT UNSIGNED,
  IN p_actor VARCHAR(200), IN p_schedule_id BIGINT UNSIGNED, IN p_schedule_version INT UNSIGNED,
  IN p_fire_time DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_created TINYINT;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE EXIT HANDLER FOR 1062
  BEGIN
    ROLLBACK;
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
      MESSAGE_TEXT = 'a concurrent submission with this Idempotency-Key committed first; retry';
  END;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 2, v_app, v_limits);
  CALL task_submit_one(p_namespace_id, p_queue_id, p_idempotency_key, p_fingerprint, p_handler,
                       p_handler_version, p_payload_version, p_payload, p_business_key,
                       p_concurrency_key, p_priority, p_max_attempts, p_deadline_seconds, p_actor,
                       p_schedule_id, p_schedule_version, p_fire_time, v_limits & 2,
                       v_task, v_created);
  COMMIT;
  SELECT t.public_id AS task_id, v_created AS created,
         t.id, t.public_id, q.public_id AS queue_public_id, t.queue_id, t.state, t.handler,
         t.handler_version, t.payload_version, t.payload, t.business_key, t.concurrency_key,
         t.priority, t.max_attempts, t.attempts_used, t.available_at, t.deadline_at, t.created_at,
         t.updated_at, t.finished_at, t.result, t.error, t.schedule_version, t.fire_time,
         s.public_id AS schedule_public_id
    FROM tasks t JOIN queues q ON q.id = t.queue_id LEFT JOIN schedules s ON s.id = t.schedule_id
   WHERE t.id = v_task;
END
