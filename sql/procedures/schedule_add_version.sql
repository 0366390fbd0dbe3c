-- schedule_add_version: a new immutable version (rule and/or definition); it applies to fires
-- after it, so next_fire_at is replaced by the one the shell computed from the new rule.
-- Result set: {schedule_id, version}.
-- Errors: NOT_FOUND, STATE_CONFLICT (deleted schedule).
-- Locks: applications row, schedules row, then the new schedule_versions row.
CREATE PROCEDURE schedule_add_version(
  IN p_namespace_id BIGINT UNSIGNED, IN p_schedule_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_rule_kind VARCHAR(10),
  IN p_cron VARCHAR(120), IN p_timezone VARCHAR(64), IN p_interval_seconds INT UNSIGNED,
  IN p_definition MEDIUMTEXT, IN p_next_fire_at DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_schedule BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(10);
  DECLARE v_version INT UNSIGNED;
  DECLARE v_now DATETIME(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT id, application_id INTO v_schedule, v_app FROM schedules
   WHERE public_id = p_schedule_public_id AND namespace_id = p_namespace_id;
  IF v_schedule IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: schedule not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  SELECT state, current_version + 1 INTO v_state, v_version FROM schedules
   WHERE id = v_schedule FOR UPDATE;
  IF v_state = 'DELETED' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: schedule is deleted';
  END IF;
  INSERT INTO schedule_versions (schedule_id, version, rule_kind, cron, timezone,
                                 interval_seconds, definition, effective_from, created_at)
    VALUES (v_schedule, v_version, p_rule_kind, p_cron, p_timezone, p_interval_seconds,
            p_definition, v_now, v_now);
  UPDATE schedules SET current_version = v_version, next_fire_at = p_next_fire_at,
                       updated_at = v_now
   WHERE id = v_schedule;
  COMMIT;
  SELECT p_schedule_public_id AS schedule_id, v_version AS version;
END
