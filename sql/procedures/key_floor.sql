-- key_floor: the token a new key row starts at (R5): its stripe's floor, read under a shared
-- lock held to the caller's commit, so that no deletion of a key row of the stripe can raise
-- the floor between this read and the new row's insert. Creators share the lock; a deletion
-- (keys_reclaim) takes it exclusively, briefly. Helper inside the caller's transaction, called
-- before the key row is inserted and while the caller holds no row of the stripe's keys that
-- a deletion could want (a deletion skips locked key rows, so it never waits for one).
-- Locks: the key's key_floors row (shared).
CREATE PROCEDURE key_floor(IN p_namespace_id BIGINT UNSIGNED,
                           IN p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                           OUT p_floor BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  SET p_floor = NULL;
  CALL key_floors_ensure(p_namespace_id);
  SELECT floor INTO p_floor FROM key_floors
   WHERE namespace_id = p_namespace_id AND stripe = CRC32(p_key) MOD 16 LOCK IN SHARE MODE;
END
