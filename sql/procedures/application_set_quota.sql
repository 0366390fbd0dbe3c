-- application_set_quota: set an application's quotas (orbit-admin set-quota, SPEC 1).
-- Params: application name, max_active_attempts and max_unfinished (NULL = unlimited).
-- New limits apply to later claims and submissions; nothing running is interrupted and nothing
-- accepted is dropped when a limit is lowered below the current usage.
-- Result set: {application_id, max_active_attempts, max_unfinished, active_attempts,
--   unfinished_tasks}.
-- Errors: NOT_FOUND.
-- Locks: applications row.
CREATE PROCEDURE application_set_quota(IN p_application VARCHAR(100),
                                       IN p_max_active_attempts INT UNSIGNED,
                                       IN p_max_unfinished INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE name = p_application FOR UPDATE;
  IF v_app IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: application not found';
  END IF;
  UPDATE applications SET max_active_attempts = p_max_active_attempts,
                          max_unfinished = p_max_unfinished
   WHERE id = v_app;
  COMMIT;
  SELECT id AS application_id, max_active_attempts, max_unfinished, active_attempts,
         unfinished_tasks
    FROM applications WHERE id = v_app;
END
