-- schedule_advance: record a fire and move the schedule to its next fire time, compare-and-set
-- on the fire time the scheduler acted on, so a racing or retrying scheduler changes nothing
-- twice. The fire's task was created before this call by task_submit with the idempotency key
-- 'schedule:<id>:<fire time>', which is what makes each fire create exactly one task even when
-- several schedulers race or one dies between the two calls.
-- Params: schedule internal id, expected next_fire_at, the nominal fire time, version used,
--   task public id (NULL when refused by a quota), the following fire time.
-- Result set: {advanced (1 or 0)}.
-- Locks: applications row, schedules row, then the schedule_fires row.
CREATE PROCEDURE schedule_advance(
  IN p_schedule_id BIGINT UNSIGNED, IN p_expected DATETIME(6), IN p_fire_time DATETIME(6),
  IN p_version INT UNSIGNED, IN p_task_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_next DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_next DATETIME(6);
  DECLARE v_state VARCHAR(10);
  DECLARE v_advanced INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT application_id INTO v_app FROM schedules WHERE id = p_schedule_id;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
  SELECT next_fire_at, state INTO v_next, v_state FROM schedules WHERE id = p_schedule_id FOR UPDATE;
  INSERT INTO schedule_fires (schedule_id, fire_time, version, task_id, created_at)
    SELECT p_schedule_id, p_fire_time, p_version,
           (SELECT id FROM tasks WHERE public_id = p_task_public_id), UTC_TIMESTAMP(6)
    ON DUPLICATE KEY UPDATE schedule_id = schedule_id;
  IF v_state = 'ACTIVE' AND v_next = p_expected THEN
    UPDATE schedules SET next_fire_at = p_next, updated_at = UTC_TIMESTAMP(6)
     WHERE id = p_schedule_id;
    SET v_advanced = 1;
  END IF;
  COMMIT;
  SELECT v_advanced AS advanced;
END
