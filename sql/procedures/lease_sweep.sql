-- lease_sweep: the periodic sweeper (run by every `orbit` server, about once a second).
-- Up to p_limit items of each kind, each in its own short transaction that first takes a gate
-- of the item's namespace (namespace_gate, with the application row under quotas; the
-- documented order), so several servers may sweep at once and every step is idempotent:
--   1. expired leases -> attempt_recover (EXPIRED / UNKNOWN, permits released);
--   2. DELAYED tasks whose time came -> task_enter_due (READY or parked);
--   3. WAITING tasks past their total deadline -> DEADLINE_EXCEEDED.
-- Result set: {recovered, promoted, expired}.
-- Indexes: ix_attempts_lease (state, lease_expires_at), ix_tasks_due (lane, available_at),
--   ix_tasks_deadline (lane, deadline_at). Each loop walks its index in order, one state or
--   lane at a time, from the position (time, id) of the item before: an item that another
--   transaction changed first is passed, not read again, and each read is of the next row.
--   Walking by id instead read, per item, either every due row of the kind (a range sorted
--   for its least id: quadratic in a mass expiry) or every older row of the table (the
--   primary key scanned up to the first due row: the whole attempts history).
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
  DECLARE v_at DATETIME(6);
  DECLARE v_kind VARCHAR(10);
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  recover_states: WHILE v_i < 2 DO
    SET v_kind = ELT(v_i + 1, 'LEASED', 'RUNNING'), v_at = '1000-01-01', v_last = 0, v_i = v_i + 1;
    recover_loop: LOOP
      SET v_next = NULL;
      SELECT id, namespace_id, lease_expires_at INTO v_next, v_ns, v_at
        FROM attempts FORCE INDEX (ix_attempts_lease)
       WHERE state = v_kind AND lease_expires_at <= UTC_TIMESTAMP(6)
         AND (lease_expires_at > v_at OR (lease_expires_at = v_at AND id > v_last))
       ORDER BY lease_expires_at, id LIMIT 1;
      IF v_next IS NULL OR v_recovered >= p_limit THEN LEAVE recover_loop; END IF;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      CALL namespace_gate(v_ns, 3, v_app, v_limits);
      CALL attempt_recover(v_next, 'system:sweeper', v_limits);
      COMMIT;
      SET v_recovered = v_recovered + 1, v_last = v_next;
    END LOOP;
  END WHILE;

  SET v_at = '1000-01-01', v_last = 0;
  due_loop: LOOP
    SET v_next = NULL;
    SELECT id, namespace_id, available_at INTO v_next, v_ns, v_at
      FROM tasks FORCE INDEX (ix_tasks_due)
     WHERE lane = 'DELAYED' AND available_at <= UTC_TIMESTAMP(6)
       AND (available_at > v_at OR (available_at = v_at AND id > v_last))
     ORDER BY available_at, id LIMIT 1;
    IF v_next IS NULL OR v_promoted >= p_limit THEN LEAVE due_loop; END IF;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    CALL namespace_gate(v_ns, 0, v_app, v_limits);
    CALL task_enter_due(v_next, UTC_TIMESTAMP(6));
    COMMIT;
    SET v_promoted = v_promoted + 1, v_last = v_next;
  END LOOP;

  SET v_i = 0;
  deadline_lanes: WHILE v_i < 3 DO
    SET v_kind = ELT(v_i + 1, 'READY', 'DELAYED', 'BLOCKED'), v_at = '1000-01-01', v_last = 0,
        v_i = v_i + 1;
    deadline_loop: LOOP
      SET v_next = NULL;
      SELECT id, application_id, namespace_id, queue_id, deadline_at
        INTO v_next, v_app, v_ns, v_queue, v_at
        FROM tasks FORCE INDEX (ix_tasks_deadline)
       WHERE lane = v_kind AND deadline_at <= UTC_TIMESTAMP(6)
         AND (deadline_at > v_at OR (deadline_at = v_at AND id > v_last))
       ORDER BY deadline_at, id LIMIT 1;
      IF v_next IS NULL OR v_expired >= p_limit THEN LEAVE deadline_loop; END IF;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      CALL namespace_gate(v_ns, 3, v_app, v_limits);
      CALL task_lock_waiting(v_next, v_limits, v_state, v_limits);
      IF v_state = 'WAITING' THEN
        CALL task_leave_lane(v_next);
        CALL task_finish(v_next, v_app, v_queue, 'DEADLINE_EXCEEDED', NULL, NULL, v_limits);
        CALL history_add(v_next, v_ns, NULL, NULL, 'DEADLINE_EXCEEDED', 'WAITING',
                         'DEADLINE_EXCEEDED', 'system:sweeper', 'deadline passed while waiting');
      END IF;
      COMMIT;
      SET v_expired = v_expired + 1, v_last = v_next;
    END LOOP;
  END WHILE;

  SELECT v_recovered AS recovered, v_promoted AS promoted, v_expired AS expired;
END
