-- namespace_resolve: application / environment / namespace names to their ids (helper of
-- worker_namespace and credential_create; called inside their transactions or before them).
-- Params: the three names; OUT the application, environment and namespace ids.
-- Errors: NOT_FOUND when the namespace does not exist.
-- Locks: none (read-only).
CREATE PROCEDURE namespace_resolve(IN p_application VARCHAR(100), IN p_environment VARCHAR(100),
                                   IN p_namespace VARCHAR(100), OUT o_app BIGINT UNSIGNED,
                                   OUT o_env BIGINT UNSIGNED, OUT o_ns BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  SET o_app = NULL, o_env = NULL, o_ns = NULL;
  SELECT a.id, e.id, n.id INTO o_app, o_env, o_ns
    FROM applications a
    JOIN environments e ON e.application_id = a.id AND e.name = p_environment
    JOIN namespaces n ON n.environment_id = e.id AND n.name = p_namespace
   WHERE a.name = p_application;
  IF o_ns IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
END
