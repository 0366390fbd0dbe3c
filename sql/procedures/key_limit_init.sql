-- key_limit_init: give key rows just made the limit and rate of the namespace's key policies
-- (P1, P6).
-- Helper inside the caller's transaction, called after the insert: p_resource_id names the
-- row, or 0 for the keys of submit_fast_mem (a batch's group, task_submit_many: its keys
-- that had a row keep their limit, which every policy change keeps current).
-- The rules are read under a shared lock, after the row exists: a policy change writes its
-- rule and then updates the key rows it covers, so either it meets this uncommitted row and
-- waits for it, or this read waits for its rule; a plain read could take the old rule after
-- the change had already passed the row's place (sql/README.md, "Key policies"). A namespace
-- without rules pays one index probe.
-- Locks: the namespace's key_policies rows (shared), after the caller's key rows.
CREATE PROCEDURE key_limit_init(IN p_namespace_id BIGINT UNSIGNED, IN p_resource_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_rules INT DEFAULT 0;
  SELECT COUNT(*) INTO v_rules FROM key_policies
   WHERE namespace_id = p_namespace_id LOCK IN SHARE MODE;
  IF v_rules > 0 AND p_resource_id > 0 THEN
    UPDATE concurrency_resources
       SET key_limit = COALESCE(key_policy_value(namespace_id, concurrency_key, 'limit'), 1),
           rate_permits = key_policy_value(namespace_id, concurrency_key, 'permits'),
           rate_seconds = key_policy_value(namespace_id, concurrency_key, 'seconds')
     WHERE id = p_resource_id;
  ELSEIF v_rules > 0 THEN
    UPDATE submit_fast_mem f STRAIGHT_JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
        ON r.namespace_id = p_namespace_id AND r.concurrency_key = f.concurrency_key
       SET r.key_limit = COALESCE(key_policy_value(p_namespace_id, r.concurrency_key, 'limit'), 1),
           r.rate_permits = key_policy_value(p_namespace_id, r.concurrency_key, 'permits'),
           r.rate_seconds = key_policy_value(p_namespace_id, r.concurrency_key, 'seconds')
     WHERE f.concurrency_key <> '';
  END IF;
END
