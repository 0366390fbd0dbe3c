-- key_policy_apply: bring the key rows a rule covers to the limits and rates the namespace's
-- policies give them now (P3, P6), and start their parked tasks where the limit rose. Helper inside
-- key_policy_write's transaction, called for the rule as it was and as it is.
-- Params: namespace; 'KEY' or 'PREFIX'; the key or the prefix. Out: the key rows whose limit
-- changed, and the keys given a READY candidate.
-- A key's limit and rate are recomputed from every rule (key_policy_value), not set to this
-- rule's: an exact rule or a longer prefix may still win. A key's candidate that waits for its
-- rate (DELAYED) is made READY at once when the rate in force now lets it begin. Lowering a limit revokes nothing: the slots at
-- or above it are not granted again (attempt_grant), and their holders finish or expire. A
-- raised limit promotes the key's next parked task at once (key_promote_next), and each grant
-- of it the next, up to the new limit.
-- Locks: the covered concurrency_resources rows, in key order (one range of
-- uq_concurrency_resources_key: LIKE on the prefix, its wildcards escaped), then their promoted
-- tasks. A prefix over many keys holds them all to the commit: a policy change is an
-- operator's act, and its cost grows with the keys it covers.
CREATE PROCEDURE key_policy_apply(IN p_namespace_id BIGINT UNSIGNED, IN p_kind VARCHAR(6),
                                  IN p_pattern VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                                  OUT p_changed INT, OUT p_started INT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_like VARCHAR(600) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_after VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT '';
  DECLARE v_candidate BIGINT UNSIGNED;
  SET p_changed = 0, p_started = 0;
  -- The pattern with LIKE's wildcards escaped; a prefix's range then ends in '%'.
  SET v_like = REPLACE(REPLACE(REPLACE(p_pattern, '!', '!!'), '%', '!%'), '_', '!_');
  IF p_kind = 'PREFIX' THEN
    SET v_like = CONCAT(v_like, '%');
  END IF;
  UPDATE concurrency_resources
     SET key_limit = COALESCE(key_policy_value(namespace_id, concurrency_key, 'limit'), 1),
         rate_permits = key_policy_value(namespace_id, concurrency_key, 'permits'),
         rate_seconds = key_policy_value(namespace_id, concurrency_key, 'seconds')
   WHERE namespace_id = p_namespace_id AND concurrency_key LIKE v_like ESCAPE '!';
  SET p_changed = ROW_COUNT();
  IF p_changed > 0 THEN
    -- Candidates waiting for a rate that lets them begin now (P6): a candidate is DELAYED only
    -- for its key's rate (a backoff's or a debounce's task is no candidate).
    UPDATE concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = r.candidate_task_id
       SET t.lane = 'READY', t.available_at = UTC_TIMESTAMP(6), t.updated_at = UTC_TIMESTAMP(6)
     WHERE r.namespace_id = p_namespace_id AND r.concurrency_key LIKE v_like ESCAPE '!'
       AND t.lane = 'DELAYED'
       AND (r.rate_permits IS NULL
            OR NOT key_rate_next(r.id, r.rate_permits, r.rate_seconds) > UTC_TIMESTAMP(6));
    SET p_started = ROW_COUNT();
  END IF;
  -- Keys with tasks waiting, no candidate and room now: each gets its next task. Rows this
  -- transaction holds, read plainly in key order through the same range.
  promote: WHILE p_changed > 0 DO
    SET v_next = NULL;
    SELECT id, concurrency_key INTO v_next, v_after
      FROM concurrency_resources FORCE INDEX (uq_concurrency_resources_key)
     WHERE namespace_id = p_namespace_id AND concurrency_key > v_after
       AND concurrency_key LIKE v_like ESCAPE '!'
       AND waiting_since IS NOT NULL AND candidate_task_id IS NULL
       AND (holder_attempt_id IS NOT NULL) + slot_holders < key_limit
     ORDER BY concurrency_key LIMIT 1;
    IF v_next IS NULL THEN LEAVE promote; END IF;
    CALL key_promote_next(v_next);
    SELECT candidate_task_id INTO v_candidate FROM concurrency_resources WHERE id = v_next;
    SET p_started = p_started + (v_candidate IS NOT NULL);
  END WHILE;
END
