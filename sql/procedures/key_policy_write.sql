-- key_policy_write: create, change or delete a key policy (P1, P3; POST, PUT and DELETE
-- /v1/key-policies, orbit-admin key-policy), and bring the keys it covers to their new limits
-- in the same transaction (key_policy_apply).
-- Params: namespace; the policy's public id (NULL: create one); 'KEY' or 'PREFIX' and the key
--   or prefix (validated by the shell, K2), the limit (1..1000) and the rate (P6: permits
--   1..1000 per 1..86400 seconds, both NULL for none); p_delete 1 to delete the policy named
--   (the rest ignored).
-- Result set: {policy_id, match_kind, pattern, key_limit, rate_permits, rate_seconds,
--   created_at, updated_at, deleted, keys_changed, keys_started}.
-- Errors: NOT_FOUND (no such namespace, or no such policy in it), STATE_CONFLICT (another
--   policy of the namespace has this key or prefix), QUOTA_EXCEEDED (the namespace holds
--   1,000 policies already), INVALID_ARGUMENT (a limit or a rate out of bounds).
-- Locks, in order: a gate of the namespace (namespace_gate: a queue's pause, which parks READY
--   tasks, holds every gate), the namespaces row (policy writes of a namespace one at a time:
--   the count and the rule's uniqueness are decided under it), the policy row, then
--   key_policy_apply's key rows in key order and their promoted tasks. A key row made
--   meanwhile reads the rules after its insert, under a shared lock (key_limit_init): the two
--   may deadlock, and the shell retries the one rolled back.
CREATE PROCEDURE key_policy_write(IN p_namespace_id BIGINT UNSIGNED,
                                  IN p_policy CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                  IN p_kind VARCHAR(6),
                                  IN p_pattern VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                                  IN p_limit INT UNSIGNED, IN p_rate_permits INT UNSIGNED,
                                  IN p_rate_seconds INT UNSIGNED, IN p_delete TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_id BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_public CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_old_kind VARCHAR(6) DEFAULT NULL;
  DECLARE v_old_pattern VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_rules INT;
  DECLARE v_now DATETIME(6);
  DECLARE v_changed INT DEFAULT 0;
  DECLARE v_started INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_s INT;
  DECLARE c_max_rules INT DEFAULT 1000;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF NOT p_delete AND (p_limit IS NULL OR p_limit < 1 OR p_limit > 1000
                       OR p_kind NOT IN ('KEY', 'PREFIX') OR COALESCE(p_pattern, '') = ''
                       OR (p_rate_permits IS NULL) <> (p_rate_seconds IS NULL)
                       OR p_rate_permits NOT BETWEEN 1 AND 1000
                       OR p_rate_seconds NOT BETWEEN 1 AND 86400) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INVALID_ARGUMENT: a policy needs a key or a prefix, a limit of 1 to 1000, and a rate of 1 to 1000 permits per 1 to 86400 seconds or none';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL namespace_gate(p_namespace_id, 0, v_app, v_limits);
  IF v_app IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
  SELECT COUNT(*) INTO v_rules FROM namespaces WHERE id = p_namespace_id FOR UPDATE;
  -- The clock is read after the locks: a call that waited must not stamp times earlier than
  -- the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF p_policy IS NOT NULL THEN
    SELECT id, match_kind, pattern INTO v_id, v_old_kind, v_old_pattern FROM key_policies
     WHERE public_id = p_policy AND namespace_id = p_namespace_id FOR UPDATE;
    IF v_id IS NULL THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: key policy not found';
    END IF;
  END IF;
  IF NOT p_delete AND EXISTS (SELECT 1 FROM key_policies
                               WHERE namespace_id = p_namespace_id AND match_kind = p_kind
                                 AND pattern = p_pattern AND NOT (id <=> v_id)) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: a key policy for this key or prefix exists in the namespace';
  END IF;
  IF p_delete THEN
    DELETE FROM key_policies WHERE id = v_id;
  ELSEIF v_id IS NULL THEN
    SELECT COUNT(*) INTO v_rules FROM key_policies WHERE namespace_id = p_namespace_id;
    IF v_rules >= c_max_rules THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUOTA_EXCEEDED: a namespace holds at most 1000 key policies';
    END IF;
    SET v_public = new_public_id();
    INSERT INTO key_policies (public_id, namespace_id, match_kind, pattern, key_limit,
                              rate_permits, rate_seconds, created_at, updated_at)
      VALUES (v_public, p_namespace_id, p_kind, p_pattern, p_limit, p_rate_permits,
              p_rate_seconds, v_now, v_now);
    SET v_id = LAST_INSERT_ID();
  ELSE
    UPDATE key_policies SET match_kind = p_kind, pattern = p_pattern, key_limit = p_limit,
                            rate_permits = p_rate_permits, rate_seconds = p_rate_seconds,
                            updated_at = v_now
     WHERE id = v_id;
  END IF;
  -- The keys the rule covered and the keys it covers now.
  IF v_old_kind IS NOT NULL THEN
    CALL key_policy_apply(p_namespace_id, v_old_kind, v_old_pattern, v_changed, v_started);
  END IF;
  IF NOT p_delete THEN
    CALL key_policy_apply(p_namespace_id, p_kind, p_pattern, v_n, v_s);
    SET v_changed = v_changed + v_n, v_started = v_started + v_s;
  END IF;
  COMMIT;
  IF p_delete THEN
    SELECT p_policy AS policy_id, v_old_kind AS match_kind, v_old_pattern AS pattern,
           NULL AS key_limit, NULL AS rate_permits, NULL AS rate_seconds, NULL AS created_at,
           v_now AS updated_at, 1 AS deleted,
           v_changed AS keys_changed, v_started AS keys_started;
  ELSE
    SELECT public_id AS policy_id, match_kind, pattern, key_limit, rate_permits, rate_seconds,
           created_at, updated_at, 0 AS deleted, v_changed AS keys_changed, v_started AS keys_started
      FROM key_policies WHERE id = v_id;
  END IF;
END
