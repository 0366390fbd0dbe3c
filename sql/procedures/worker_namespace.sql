-- worker_namespace: resolve application / environment / namespace names to the ids the worker
-- procedures take. For direct (MySQL transport, W9) workers, whose least-privilege account may
-- only EXECUTE worker procedures and cannot read tables.
-- Result set: {application_id, namespace_id, worker_protocol, submit_protocol}.
--   worker_protocol numbers the signatures and answers of the worker procedures, and
--   submit_protocol those of the submission procedures (producer_queue, task_submit,
--   task_submit_many); each goes up with every change a direct worker or producer of the
--   previous number would break on, and must equal the SDK's (transport.WORKER_PROTOCOL,
--   producer.SUBMIT_PROTOCOL): the SDK refuses a database of another number at connect.
-- Errors: NOT_FOUND.
-- Locks: none (read-only).
CREATE PROCEDURE worker_namespace(IN p_application VARCHAR(100), IN p_environment VARCHAR(100),
                                  IN p_namespace VARCHAR(100))
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_env BIGINT UNSIGNED;
  DECLARE v_ns BIGINT UNSIGNED;
  CALL namespace_resolve(p_application, p_environment, p_namespace, v_app, v_env, v_ns);
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(v_ns);  -- L4: another tenant's names are not found
  END IF;
  SELECT v_app AS application_id, v_ns AS namespace_id, 3 AS worker_protocol,
         2 AS submit_protocol;
END
