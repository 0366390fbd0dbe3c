-- namespace_gates_lock: hold every gate of a namespace, for a change writers must not overlap
-- (a quota set, a queue paused or resumed). Helper inside the caller's transaction, its first
-- lock; waits for every writer of the namespace in flight, and admits none until the caller
-- commits.
-- Locks: the namespace's namespace_gates rows, in slot order (an equality on the primary key's
-- prefix: nothing past the namespace's last gate is locked).
CREATE PROCEDURE namespace_gates_lock(IN p_namespace_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_ignored BIGINT;
  SELECT COUNT(*) INTO v_ignored FROM namespace_gates WHERE namespace_id = p_namespace_id FOR UPDATE;
END
