-- key_rate_next(key row, permits, seconds): when the next permit of a key with a rate (P6) may
-- begin: its permits-th latest grant time plus the window; NULL while it has had fewer grants
-- (key_rate_grants keeps the latest, key_rate_record). At most ``permits`` rows are read, by
-- the primary key's prefix. Callers hold the key row: every change of the ring holds it.
CREATE FUNCTION key_rate_next(p_resource_id BIGINT UNSIGNED, p_permits INT UNSIGNED,
                              p_seconds INT UNSIGNED)
  RETURNS DATETIME(6)
  NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_skip INT UNSIGNED DEFAULT p_permits - 1;
  DECLARE v_at DATETIME(6) DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_at = NULL;
  SELECT granted_at INTO v_at FROM key_rate_grants
   WHERE resource_id = p_resource_id ORDER BY granted_at DESC LIMIT v_skip, 1;
  RETURN v_at + INTERVAL p_seconds SECOND;
END
