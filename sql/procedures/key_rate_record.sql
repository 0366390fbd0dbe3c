-- key_rate_record: note that a permit of a key with a rate began now (P6), in the key's ring
-- of its latest grant times: a row added while the ring has fewer than ``permits``, else the
-- oldest overwritten. Helper inside a grant's transaction; the caller holds the key row.
-- Locks: the key's key_rate_grants rows, after its key row.
CREATE PROCEDURE key_rate_record(IN p_resource_id BIGINT UNSIGNED, IN p_permits INT UNSIGNED,
                                 IN p_at DATETIME(6))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_rows INT UNSIGNED DEFAULT 0;
  SELECT COUNT(*) INTO v_rows FROM key_rate_grants WHERE resource_id = p_resource_id;
  IF v_rows < p_permits THEN
    INSERT INTO key_rate_grants (resource_id, n, granted_at) VALUES (p_resource_id, v_rows, p_at);
  ELSE
    UPDATE key_rate_grants SET granted_at = p_at
     WHERE resource_id = p_resource_id ORDER BY granted_at, n LIMIT 1;
  END IF;
END
