-- schedule_create: create a schedule with its version 1 (K10). The shell validates the rule
-- (cron parsing needs a cron library) and the definition (the same submission rules as
-- POST /v1/tasks, K2 included) and computes the first fire time.
-- Result set: {schedule_id (public)}.
-- Errors: STATE_CONFLICT (name taken in the namespace), QUOTA_EXCEEDED (the namespace has
--   1,000 schedules: a list of them answers them all, and one tenant's list must stay small
--   enough for a server process to build while others wait, L1).
-- Locks: applications row (so the count below is exact), then the new schedules and
--   schedule_versions rows.
CREATE PROCEDURE schedule_create(
  IN p_namespace_id BIGINT UNSIGNED, IN p_application_id BIGINT UNSIGNED, IN p_name VARCHAR(100),
  IN p_rule_kind VARCHAR(10), IN p_cron VARCHAR(120), IN p_timezone VARCHAR(64),
  IN p_interval_seconds INT UNSIGNED, IN p_definition MEDIUMTEXT, IN p_next_fire_at DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_schedule BIGINT UNSIGNED;
  DECLARE v_public CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_now DATETIME(6);
  DECLARE v_count INT;
  DECLARE c_schedules_max INT DEFAULT 1000;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = p_application_id FOR UPDATE;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF EXISTS (SELECT 1 FROM schedules WHERE namespace_id = p_namespace_id AND name = p_name) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: a schedule with this name exists';
  END IF;
  -- Counted up to the bound through uq_schedules_name (namespace_id, name), under the
  -- application row every creation of the namespace locks first.
  SELECT COUNT(*) INTO v_count
    FROM (SELECT 1 FROM schedules FORCE INDEX (uq_schedules_name)
           WHERE namespace_id = p_namespace_id LIMIT c_schedules_max) s;
  IF v_count >= c_schedules_max THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUOTA_EXCEEDED: a namespace holds at most 1,000 schedules';
  END IF;
  SET v_public = new_public_id();
  INSERT INTO schedules (public_id, namespace_id, application_id, name, state, current_version,
                         next_fire_at, created_at, updated_at)
    VALUES (v_public, p_namespace_id, p_application_id, p_name, 'ACTIVE', 1, p_next_fire_at,
            v_now, v_now);
  SET v_schedule = LAST_INSERT_ID();
  INSERT INTO schedule_versions (schedule_id, version, rule_kind, cron, timezone,
                                 interval_seconds, definition, effective_from, created_at)
    VALUES (v_schedule, 1, p_rule_kind, p_cron, p_timezone, p_interval_seconds, p_definition,
            v_now, v_now);
  COMMIT;
  SELECT v_public AS schedule_id;
END
