-- task_leave_lane: take a WAITING task out of dispatch (cancel, deadline, claim refusal).
-- Helper inside the caller's transaction; the caller holds a gate of the namespace and the
-- task row (a parked task's key row before it: task_lock_waiting).
-- When the task was its key's READY candidate, the candidacy passes to the next parked task
-- so a key with room never stays without a candidate while tasks wait for it. A parked task
-- that leaves a key without a candidate goes through the same promotion (key_promote_next:
-- nothing while the key is full), which clears the key's waiting_since when no task is left
-- to promote.
-- Locks: the key's concurrency_resources row.
CREATE PROCEDURE task_leave_lane(IN p_task_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_resource BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_candidate BIGINT UNSIGNED;
  UPDATE tasks SET lane = NULL WHERE id = p_task_id;
  SELECT r.id, r.candidate_task_id INTO v_resource, v_candidate
    FROM tasks t JOIN concurrency_resources r
      ON r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key
   WHERE t.id = p_task_id AND t.concurrency_key <> '' FOR UPDATE;
  IF v_resource IS NOT NULL AND (v_candidate IS NULL OR v_candidate = p_task_id) THEN
    UPDATE concurrency_resources SET candidate_task_id = NULL WHERE id = v_resource;
    CALL key_promote_next(v_resource);
  END IF;
END
