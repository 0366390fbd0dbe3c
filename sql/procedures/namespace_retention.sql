-- namespace_retention: show, and when given, set a namespace's retention windows (R3;
-- orbit-admin retention). A shorter window applies from the cleanup's next pass on.
-- Params: namespace; seconds a finished task is kept (NULL: unchanged); seconds an idle key
--   row is kept (NULL: unchanged).
-- Result set: {finished_for_seconds, keys_idle_for_seconds, cleaned_at}: the windows in force
--   (an idle-key window never set is the retention's).
-- Errors: NOT_FOUND (no such namespace).
-- Locks: the namespaces row, when it changes.
CREATE PROCEDURE namespace_retention(IN p_namespace_id BIGINT UNSIGNED,
                                     IN p_finished_for INT UNSIGNED,
                                     IN p_keys_idle_for INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF NOT EXISTS (SELECT 1 FROM namespaces WHERE id = p_namespace_id) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
  IF p_finished_for IS NOT NULL OR p_keys_idle_for IS NOT NULL THEN
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    UPDATE namespaces
       SET retention_seconds = COALESCE(p_finished_for, retention_seconds),
           keys_idle_seconds = COALESCE(p_keys_idle_for, keys_idle_seconds)
     WHERE id = p_namespace_id;
    COMMIT;
  END IF;
  SELECT retention_seconds AS finished_for_seconds,
         COALESCE(keys_idle_seconds, retention_seconds) AS keys_idle_for_seconds, cleaned_at
    FROM namespaces WHERE id = p_namespace_id;
END
