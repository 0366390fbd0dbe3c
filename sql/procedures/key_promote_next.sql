-- key_promote_next: make the next parked task of a free key its READY candidate.
-- Helper inside the caller's transaction. The caller holds the application row and the
-- concurrency_resources row (FOR UPDATE) and has checked holder and candidate are both NULL.
-- Picks the best BLOCKED task of the key (priority, id) whose queue is ACTIVE and whose
-- available_at has passed; tasks still backing off stay parked and are promoted by the due
-- sweep (procrastinate #1599: a backing-off task must not wait for another release).
-- Index: ix_tasks_key_lane (namespace_id, concurrency_key, lane, priority, id).
CREATE PROCEDURE key_promote_next(IN p_resource_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_task BIGINT UNSIGNED DEFAULT NULL;
  SELECT t.id INTO v_task
    FROM concurrency_resources r
    JOIN tasks t ON t.namespace_id = r.namespace_id AND t.concurrency_key = r.concurrency_key
                AND t.lane = 'BLOCKED'
    JOIN queues q ON q.id = t.queue_id AND q.state = 'ACTIVE'
   WHERE r.id = p_resource_id AND t.available_at <= UTC_TIMESTAMP(6)
   ORDER BY t.priority, t.id
   LIMIT 1
   FOR UPDATE;
  IF v_task IS NOT NULL THEN
    UPDATE tasks SET lane = 'READY', updated_at = UTC_TIMESTAMP(6) WHERE id = v_task;
    UPDATE concurrency_resources SET candidate_task_id = v_task WHERE id = p_resource_id;
  END IF;
END
