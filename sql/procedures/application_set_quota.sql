-- application_set_quota: set an application's quotas (orbit-admin set-quota, SPEC 1).
-- Params: application name, max_active_attempts and max_unfinished (NULL = unlimited).
-- New limits apply to later claims and submissions; nothing running is interrupted and nothing
-- accepted is dropped when a limit is lowered below the current usage.
-- Result set: {application_id, max_active_attempts, max_unfinished, active_attempts,
--   unfinished_tasks}, the last two counted now.
-- Errors: NOT_FOUND.
-- Locks, in order: every gate of each of the application's namespaces (by namespace id), then
--   the applications row. Holding the gates waits out every writer in flight and admits no
--   new one until the commit, so a counter that starts being kept here is counted exactly:
--   nobody can change what it counts meanwhile, and every writer after the commit reads the
--   new flags and keeps it (sql/README.md, "Limits without a shared lock"). While the gates
--   are held the application's writers wait: the count reads the unfinished backlog once.
CREATE PROCEDURE application_set_quota(IN p_application VARCHAR(100),
                                       IN p_max_active_attempts INT UNSIGNED,
                                       IN p_max_unfinished INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_ns BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_active_was TINYINT;
  DECLARE v_unfinished_was TINYINT;
  DECLARE v_pass INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT id INTO v_app FROM applications WHERE name = p_application;
  IF v_app IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: application not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The gates first, namespace by namespace, each set to the new flags; the application row,
  -- then a second pass for a namespace made while the first pass waited (its gates copied the
  -- flags the application row had then).
  gate_passes: WHILE v_pass < 2 DO
    SET v_next = NULL;
    SELECT MIN(id) INTO v_next FROM namespaces WHERE application_id = v_app AND id > v_ns;
    IF v_next IS NULL THEN
      SET v_pass = v_pass + 1;
      IF v_pass = 1 THEN
        SELECT max_active_attempts IS NOT NULL, max_unfinished IS NOT NULL
          INTO v_active_was, v_unfinished_was
          FROM applications WHERE id = v_app FOR UPDATE;
      END IF;
      ITERATE gate_passes;
    END IF;
    CALL namespace_gates_lock(v_next);
    UPDATE namespace_gates
       SET active_limited = p_max_active_attempts IS NOT NULL,
           unfinished_limited = p_max_unfinished IS NOT NULL
     WHERE namespace_id = v_next;
    SET v_ns = v_next;
  END WHILE;
  -- A counter kept from now on starts from the count; one kept already is exact.
  IF p_max_active_attempts IS NOT NULL AND NOT v_active_was THEN
    UPDATE applications SET active_attempts = (
      SELECT COUNT(*) FROM attempts FORCE INDEX (ix_attempts_lease)
       WHERE state IN ('LEASED', 'RUNNING') AND application_id = v_app)
     WHERE id = v_app;
  END IF;
  IF p_max_unfinished IS NOT NULL AND NOT v_unfinished_was THEN
    UPDATE applications SET unfinished_tasks = (
      SELECT COUNT(*) FROM tasks FORCE INDEX (ix_tasks_ns_state)
       WHERE namespace_id IN (SELECT id FROM namespaces WHERE application_id = v_app)
         AND state IN ('WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'))
     WHERE id = v_app;
  END IF;
  UPDATE applications SET max_active_attempts = p_max_active_attempts,
                          max_unfinished = p_max_unfinished
   WHERE id = v_app;
  COMMIT;
  SELECT id AS application_id, max_active_attempts, max_unfinished,
         (SELECT COUNT(*) FROM attempts FORCE INDEX (ix_attempts_lease)
           WHERE state IN ('LEASED', 'RUNNING') AND application_id = v_app) AS active_attempts,
         (SELECT COUNT(*) FROM tasks FORCE INDEX (ix_tasks_ns_state)
           WHERE namespace_id IN (SELECT id FROM namespaces WHERE application_id = v_app)
             AND state IN ('WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW')) AS unfinished_tasks
    FROM applications WHERE id = v_app;
END
