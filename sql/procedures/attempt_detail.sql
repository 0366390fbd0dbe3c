-- attempt_detail: one attempt as the API shows it (GET /v1/tasks/{id}/attempts/{n}, start).
-- Read-only helper. concurrency_token is 0 for unkeyed tasks; the shell omits it then (K9).
CREATE PROCEDURE attempt_detail(IN p_attempt_id BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  SELECT a.public_id AS attempt_id, t.public_id AS task_id, a.attempt_number, a.state,
         a.concurrency_token, a.concurrency_slot, t.concurrency_key, a.lease_expires_at, a.created_at,
         a.started_at, a.finished_at, a.outcome, a.retryable, a.result, a.error
    FROM attempts a JOIN tasks t ON t.id = a.task_id
   WHERE a.id = p_attempt_id;
END
