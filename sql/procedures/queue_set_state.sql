-- queue_set_state: pause or resume a queue. Nothing held is released (K6): attempts of a paused
-- queue end by result or lease. What moves is key candidacy, so a paused queue never keeps a
-- free key away from the other queues of the namespace:
--   pause:  the queue's READY keyed tasks are parked and each key's candidacy passes to the
--           next parked task in an ACTIVE queue;
--   resume: each free key without a candidate that has parked tasks here gets one again.
-- Result set: {queue_id, state}.
-- Errors: NOT_FOUND.
-- Locks, in order: every gate of the namespace (namespace_gates_lock: it waits for the writers
--   in flight and admits none until the commit, so none reads the state as it was while this
--   moves candidacy; writers read a queue's state plainly under their gate), queues row, then
--   per key: tasks rows, the key row (pause), or the key row, then its promoted task row
--   (resume).
CREATE PROCEDURE queue_set_state(IN p_namespace_id BIGINT UNSIGNED, IN p_queue_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                 IN p_state VARCHAR(10))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_current VARCHAR(10);
  DECLARE v_lane VARCHAR(10);
  DECLARE v_item BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_resource BIGINT UNSIGNED;
  DECLARE v_now DATETIME(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SELECT id, application_id INTO v_queue, v_app FROM queues
   WHERE public_id = p_queue_public_id AND namespace_id = p_namespace_id;
  IF v_queue IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gates_lock(p_namespace_id);
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  SELECT state INTO v_current FROM queues WHERE id = v_queue FOR UPDATE;
  IF v_current <> p_state THEN
    UPDATE queues SET state = p_state, updated_at = v_now WHERE id = v_queue;
    IF p_state = 'PAUSED' THEN
      -- The first READY keyed row each time (ix_tasks_queue_lane_key, past the unkeyed
      -- range): the row found leaves the range, so no scan of the queue's unkeyed backlog.
      -- A plain read, then the row locked by key and re-checked: a locking read of the range
      -- would also lock the first row past it, possibly another queue's (sql/README.md,
      -- "Locking reads").
      pause_loop: LOOP
        SET v_next = NULL, v_lane = NULL;
        SELECT id INTO v_next FROM tasks FORCE INDEX (ix_tasks_queue_lane_key)
         WHERE queue_id = v_queue AND lane = 'READY' AND concurrency_key <> ''
         ORDER BY concurrency_key, priority, id LIMIT 1;
        IF v_next IS NULL THEN LEAVE pause_loop; END IF;
        SELECT lane INTO v_lane FROM tasks WHERE id = v_next FOR UPDATE;
        IF v_lane = 'READY' THEN
          CALL task_leave_lane(v_next);
          UPDATE tasks SET lane = 'BLOCKED' WHERE id = v_next;
          UPDATE tasks t STRAIGHT_JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
              ON r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key
             SET r.waiting_since = COALESCE(r.waiting_since, v_now)
           WHERE t.id = v_next;
        END IF;
      END LOOP;
    ELSE
      -- One pass over the namespace's keys (by id), probing each for a task parked here
      -- (ix_tasks_key_lane): the work grows with the keys, not with the parked backlog.
      resume_loop: LOOP
        SET v_next = NULL, v_resource = NULL;
        SELECT r.id INTO v_next FROM concurrency_resources r
         WHERE r.namespace_id = p_namespace_id AND r.id > v_item
           AND (r.holder_attempt_id IS NOT NULL) + r.slot_holders < r.key_limit
           AND r.candidate_task_id IS NULL
           AND (SELECT t.id FROM tasks t FORCE INDEX (ix_tasks_key_lane)
                 WHERE t.namespace_id = r.namespace_id AND t.concurrency_key = r.concurrency_key
                   AND t.lane = 'BLOCKED' AND t.queue_id = v_queue LIMIT 1) IS NOT NULL
         ORDER BY r.id LIMIT 1;
        IF v_next IS NULL THEN LEAVE resume_loop; END IF;
        SELECT id INTO v_resource FROM concurrency_resources
         WHERE id = v_next AND (holder_attempt_id IS NOT NULL) + slot_holders < key_limit
           AND candidate_task_id IS NULL
           FOR UPDATE;
        IF v_resource IS NOT NULL THEN
          CALL key_promote_next(v_resource);
        END IF;
        SET v_item = v_next;
      END LOOP;
    END IF;
  END IF;
  COMMIT;
  SELECT p_queue_public_id AS queue_id, p_state AS state;
END
