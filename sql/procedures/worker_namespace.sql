-- worker_namespace: resolve application / environment / namespace names to the ids the worker
-- procedures take. For direct (MySQL transport, W9) workers, whose least-privilege account may
-- only EXECUTE worker procedures and cannot read tables.
-- Result set: {application_id, namespace_id}.
-- Errors: NOT_FOUND.
-- Locks: none (read-only).
CREATE PROCEDURE worker_namespace(IN p_application VARCHAR(100), IN p_environment VARCHAR(100),
                                  IN p_namespace VARCHAR(100))
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_ns BIGINT UNSIGNED DEFAULT NULL;
  SELECT a.id, n.id INTO v_app, v_ns
    FROM applications a
    JOIN environments e ON e.application_id = a.id AND e.name = p_environment
    JOIN namespaces n ON n.environment_id = e.id AND n.name = p_namespace
   WHERE a.name = p_application;
  IF v_ns IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
  SELECT v_app AS application_id, v_ns AS namespace_id;
END
