-- lease_sweep: the periodic sweeper (run by every `orbit` server, about once a second).
-- Up to p_limit items of each kind, each in its own short transaction that first locks the
-- item's application row (the documented order), so several servers may sweep at once and
-- every step is idempotent:
--   1. expired leases -> attempt_recover (EXPIRED / UNKNOWN, permits released);
--   2. DELAYED tasks whose backoff ran out -> task_enter_lane (READY or parked);
--   3. WAITING tasks past their total deadline -> DEADLINE_EXCEEDED.
-- Result set: {recovered, promoted, expired}.
-- Indexes: ix_attempts_lease (state, lease_expires_at), ix_tasks_due (lane, available_at),
--   ix_tasks_deadline (lane, deadline_at).
CREATE PROCEDURE lease_sweep(IN p_limit INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_queue BIGINT UNSIGNED;
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(20);
  DECLARE v_recovered INT DEFAULT 0;
  DECLARE v_promoted INT DEFAULT 0;
  DECLARE v_expired INT DEFAULT 0;
  DECLARE v_last BIGINT UNSIGNED DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  recover_loop: LOOP
    SET v_next = NULL;
    SELECT id, application_id INTO v_next, v_app FROM attempts
     WHERE state IN ('LEASED', 'RUNNING') AND lease_expires_at <= UTC_TIMESTAMP(6) AND id > v_last
     ORDER BY id LIMIT 1;
    IF v_next IS NULL OR v_recovered >= p_limit THEN LEAVE recover_loop; END IF;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
    CALL attempt_recover(v_next, 'system:sweeper');
    COMMIT;
    SET v_recovered = v_recovered + 1, v_last = v_next;
  END LOOP;

  SET v_last = 0;
  due_loop: LOOP
    SET v_next = NULL;
    SELECT id, application_id INTO v_next, v_app FROM tasks
     WHERE lane = 'DELAYED' AND available_at <= UTC_TIMESTAMP(6) AND id > v_last
     ORDER BY id LIMIT 1;
    IF v_next IS NULL OR v_promoted >= p_limit THEN LEAVE due_loop; END IF;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
    SELECT lane INTO v_state FROM tasks WHERE id = v_next FOR UPDATE;
    IF v_state = 'DELAYED' THEN
      CALL task_enter_lane(v_next);
    END IF;
    COMMIT;
    SET v_promoted = v_promoted + 1, v_last = v_next;
  END LOOP;

  SET v_last = 0;
  deadline_loop: LOOP
    SET v_next = NULL;
    SELECT id, application_id, namespace_id, queue_id INTO v_next, v_app, v_ns, v_queue FROM tasks
     WHERE lane IN ('READY', 'DELAYED', 'BLOCKED') AND deadline_at <= UTC_TIMESTAMP(6)
       AND id > v_last
     ORDER BY id LIMIT 1;
    IF v_next IS NULL OR v_expired >= p_limit THEN LEAVE deadline_loop; END IF;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT id INTO v_app FROM applications WHERE id = v_app FOR UPDATE;
    SELECT state INTO v_state FROM tasks WHERE id = v_next FOR UPDATE;
    IF v_state = 'WAITING' THEN
      CALL task_leave_lane(v_next);
      CALL task_finish(v_next, v_app, v_queue, 'DEADLINE_EXCEEDED', NULL, NULL);
      CALL history_add(v_next, v_ns, NULL, NULL, 'DEADLINE_EXCEEDED', 'WAITING',
                       'DEADLINE_EXCEEDED', 'system:sweeper', 'deadline passed while waiting');
    END IF;
    COMMIT;
    SET v_expired = v_expired + 1, v_last = v_next;
  END LOOP;

  SELECT v_recovered AS recovered, v_promoted AS promoted, v_expired AS expired;
END
