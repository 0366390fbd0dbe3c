-- namespace_gate: admit one writer of a namespace (sql/README.md, "Limits without a shared
-- lock"). Helper inside the caller's transaction, its first lock.
-- Params: namespace; p_needs, the quotas the caller's changes count against (bits: 1 the
--   application's max_active_attempts, 2 its max_unfinished).
-- Out: the namespace's application (NULL: no such namespace) and the quotas it has (the same
--   bits). Where it has one the caller needs, its row is locked here, second in the lock
--   order, and the caller keeps that quota's counter.
-- Locks: one namespace_gates row. The first free gate is taken with SKIP LOCKED, so writers
-- never wait for each other; only when every gate is held (more writers in flight than gates,
-- or a quota or queue-state change holding them all) does it wait, for a gate picked by
-- connection. The flags are read under the gate: what changes them holds every gate, so they
-- stay as read until this transaction ends.
CREATE PROCEDURE namespace_gate(IN p_namespace_id BIGINT UNSIGNED, IN p_needs TINYINT UNSIGNED,
                                OUT p_app BIGINT UNSIGNED, OUT p_limits TINYINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_ignored BIGINT UNSIGNED;
  SET p_app = NULL, p_limits = 0;
  SELECT application_id, active_limited + 2 * unfinished_limited INTO p_app, p_limits
    FROM namespace_gates WHERE namespace_id = p_namespace_id
   ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED;
  IF p_app IS NULL THEN
    SELECT application_id, active_limited + 2 * unfinished_limited INTO p_app, p_limits
      FROM namespace_gates WHERE namespace_id = p_namespace_id AND slot = CONNECTION_ID() % 32
       FOR UPDATE;
  END IF;
  IF p_limits & p_needs THEN
    SELECT id INTO v_ignored FROM applications WHERE id = p_app FOR UPDATE;
  END IF;
END
