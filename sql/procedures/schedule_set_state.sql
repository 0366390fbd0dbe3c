-- schedule_set_state: pause, resume (with a fresh next fire time from the shell, so a resume
-- does not replay the paused period) or delete (history, versions and fires are kept).
-- Result set: {schedule_id, state}.
-- Errors: NOT_FOUND, STATE_CONFLICT (deleted schedules stay deleted).
-- Locks: applications row, schedules row.
CREATE PROCEDURE schedule_set_state(IN p_namespace_id BIGINT UNSIGNED,
                                    IN p_schedule_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_state VARCHAR(10),
                                    IN p_next_fire_at DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_schedule BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(10);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT id, application_id INTO v_schedule, v_app FROM schedules
   WHERE public_id = p_schedule_public_id AND namespace_id = p_namespace_id;
  IF v_schedule IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: schedule not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
  SELECT state INTO v_state FROM schedules WHERE id = v_schedule FOR UPDATE;
  IF v_state = 'DELETED' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: schedule is deleted';
  END IF;
  UPDATE schedules
     SET state = p_state, updated_at = UTC_TIMESTAMP(6),
         next_fire_at = IF(p_state = 'ACTIVE' AND v_state <> 'ACTIVE', p_next_fire_at, next_fire_at)
   WHERE id = v_schedule;
  COMMIT;
  SELECT p_schedule_public_id AS schedule_id, p_state AS state;
END
