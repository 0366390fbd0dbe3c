-- task_submit: accept a task (POST /v1/tasks, schedule fires); the rules are task_submit_one's.
-- Params: namespace, queue (internal id, already scope-checked by the shell), Idempotency-Key,
--   fingerprint (SHA-256 of the normalised request), task fields, deadline in seconds (NULL =
--   none), actor, and the schedule origin (NULLs for API submissions).
-- Result set: {task_id (public), created (1 first acceptance, 0 replay), task}: task is the
--   task's detail as one JSON object whose keys are the columns of
--   orbit_shell.server.scoped.TASK_COLUMNS that the detail shows, times already formatted as
--   the API writes them (RFC 3339, microseconds, Z), and payload, result and error as the
--   stored JSON text. POST /v1/tasks answers from it without reading the task again (that read
--   was 18% of the request in-process), and one column instead of 26 spares the client a
--   field descriptor to parse for each (0.32 against 0.15 ms of client CPU an answer).
-- Errors: NOT_FOUND (queue not in namespace), IDEMPOTENCY_CONFLICT (same key, other content),
--   QUOTA_EXCEEDED (application or queue unfinished quota).
-- Locks: a gate of the namespace (namespace_gate); for an if_busy 'replace' of a key, the
--   queues rows it may count in that have max_unfinished (replace_queues, queues_lock: id
--   order); then those of task_submit_one.
-- A direct producer's account (orbit-admin producer-account) may call it for the namespaces it
-- is bound to only, and its tasks' actor is its account's name whatever it passes
-- (submitter_check, L4).
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
  IN p_if_busy VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_debounce_delay_ms INT UNSIGNED, IN p_debounce_max_wait_ms INT UNSIGNED,
  IN p_actor VARCHAR(200), IN p_schedule_id BIGINT UNSIGNED, IN p_schedule_version INT UNSIGNED,
  IN p_fire_time DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_created TINYINT;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_queues MEDIUMTEXT;
  DECLARE v_locked TEXT DEFAULT '';
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE EXIT HANDLER FOR 1062
  BEGIN
    ROLLBACK;
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
      MESSAGE_TEXT = 'a concurrent submission with this Idempotency-Key committed first; retry';
  END;

  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL submitter_check(p_namespace_id, p_actor);  -- a caller other than the definer (L4)
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 2, v_app, v_limits);
  IF p_if_busy = 'replace' AND p_concurrency_key <> '' THEN
    -- The limited queues a replace may count in, in id order, before the key (Lock order).
    CALL replace_queues(p_namespace_id, p_queue_id, p_concurrency_key, p_handler, v_queues);
    CALL queues_lock(p_namespace_id, v_queues, 8, v_locked);
  END IF;
  CALL task_submit_one(p_namespace_id, p_queue_id, p_idempotency_key, p_fingerprint, p_handler,
                       p_handler_version, p_payload_version, p_payload, p_business_key,
                       p_concurrency_key, p_priority, p_max_attempts, p_deadline_seconds,
                       p_if_busy, p_debounce_delay_ms, p_debounce_max_wait_ms, p_actor,
                       p_schedule_id, p_schedule_version, p_fire_time,
                       v_limits & 2, v_locked,
                       v_task, v_created);
  COMMIT;
  SELECT t.public_id AS task_id, v_created AS created,
         JSON_OBJECT('public_id', t.public_id, 'queue_public_id', q.public_id, 'state', t.state,
                     'handler', t.handler, 'handler_version', t.handler_version,
                     'payload_version', t.payload_version, 'payload', t.payload,
                     'business_key', t.business_key, 'concurrency_key', t.concurrency_key,
                     'priority', t.priority, 'max_attempts', t.max_attempts,
                     'attempts_used', t.attempts_used,
                     'available_at', DATE_FORMAT(t.available_at, '%Y-%m-%dT%H:%i:%s.%fZ'),
                     'deadline_at', DATE_FORMAT(t.deadline_at, '%Y-%m-%dT%H:%i:%s.%fZ'),
                     'created_at', DATE_FORMAT(t.created_at, '%Y-%m-%dT%H:%i:%s.%fZ'),
                     'updated_at', DATE_FORMAT(t.updated_at, '%Y-%m-%dT%H:%i:%s.%fZ'),
                     'finished_at', DATE_FORMAT(t.finished_at, '%Y-%m-%dT%H:%i:%s.%fZ'),
                     'result', t.result, 'error', t.error, 'cancel_reason', t.cancel_reason,
                     'replaced_by_public_id', r.public_id,
                     'schedule_public_id', s.public_id, 'schedule_version', t.schedule_version,
                     'fire_time', DATE_FORMAT(t.fire_time, '%Y-%m-%dT%H:%i:%s.%fZ')) AS task
    FROM tasks t JOIN queues q ON q.id = t.queue_id LEFT JOIN schedules s ON s.id = t.schedule_id
         LEFT JOIN tasks r ON r.id = t.replaced_by_task_id
   WHERE t.id = v_task;
END
