-- key_floors_ensure: make a namespace's 16 token-floor rows (key_floors) when it has none: a
-- namespace made by a version before them, during a rolling upgrade. Helper, in or before the
-- caller's transaction; a plain read first, so the common case locks nothing.
-- Locks: the new rows, when it makes them (a concurrent maker's insert is ignored).
CREATE PROCEDURE key_floors_ensure(IN p_namespace_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  IF NOT EXISTS (SELECT 1 FROM key_floors WHERE namespace_id = p_namespace_id) THEN
    INSERT IGNORE INTO key_floors (namespace_id, stripe)
    SELECT p_namespace_id, s.stripe
      FROM JSON_TABLE('[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]',
                      '$[*]' COLUMNS (stripe TINYINT UNSIGNED PATH '$')) s;
  END IF;
END
