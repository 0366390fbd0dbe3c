-- task_enter_due: let a DELAYED task whose time has come into its lane, for the due sweeps
-- (session_recover's and lease_sweep's). Helper inside the caller's transaction (it holds a
-- gate of the namespace, at READ COMMITTED). A task no longer DELAYED and due (another sweep or
-- a change got there first) is left as it is.
-- Locks, in order: the key's concurrency_resources row (a keyed task), then the task row, then
-- task_enter_lane's. The key row comes first, as in every change of a key's waiting tasks but a
-- claim's grant ("Lock order" in sql/README.md): a replacing submission holds the key and locks
-- the key's DELAYED tasks, and a sweep that held such a task while it waited for the key closed
-- a cycle with it (SKIP LOCKED is no way out on MariaDB: its request waits and is checked for
-- deadlock like any other). Under the key row the task's lane is read first without a lock: a
-- task made READY since then may be held by a claim that is waiting for this very key row, and
-- only a DELAYED one is locked (no claim takes those).
CREATE PROCEDURE task_enter_due(IN p_task_id BIGINT UNSIGNED, IN p_now DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT '';
  DECLARE v_lane VARCHAR(10) DEFAULT NULL;
  DECLARE v_rows INT;

  -- The key never changes: a plain read names the row to lock first.
  SELECT namespace_id, concurrency_key INTO v_ns, v_key FROM tasks WHERE id = p_task_id;
  IF v_key <> '' THEN
    SELECT COUNT(*) INTO v_rows FROM concurrency_resources
     WHERE namespace_id = v_ns AND concurrency_key = v_key FOR UPDATE;
  END IF;
  SELECT lane INTO v_lane FROM tasks WHERE id = p_task_id AND available_at <= p_now;
  IF v_lane = 'DELAYED' THEN
    SET v_lane = NULL;
    SELECT lane INTO v_lane FROM tasks WHERE id = p_task_id AND available_at <= p_now FOR UPDATE;
    IF v_lane = 'DELAYED' THEN
      CALL task_enter_lane(p_task_id);
    END IF;
  END IF;
END
