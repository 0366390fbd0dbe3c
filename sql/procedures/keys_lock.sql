-- keys_lock: lock the named keys' rows of a namespace in key order, in one statement. Helper
-- inside the caller's transaction, for every transaction that takes more than one key row
-- (sql/README.md, "Lock order": key rows are taken in (namespace, key) byte order, all at once,
-- before any task found through a key).
-- Params: namespace; the keys as a JSON array of strings (any order, repeats and '' allowed;
--   keys without a row are left out, callers create those afterwards in key order); p_skip: 1
--   to skip rows another transaction holds (a transaction that already holds other key rows
--   must not wait for more), recording in locked_keys_mem (worker_claim_tables) the keys
--   whose rows this call got.
-- The statement is a range read of uq_concurrency_resources_key over a constant IN list: the
-- range optimizer sorts the list, so the rows are locked in index order, each by an equality
-- on the whole unique key (no gap, nothing past the row). A join from a group table would lock
-- in the group's scan order, which for a MEMORY table is no order. The keys travel as
-- QUOTE()d utf8mb4 literals (at most 384 characters each: a longer aggregate argument, such as
-- a key's HEX, makes MariaDB's GROUP_CONCAT use an on-disk temporary table); the routine's
-- sql_mode, Orbit's, has backslash escapes, which QUOTE's escaping needs, and the shell's
-- connections are utf8mb4. A single key (a report of one keyed result, a claim of one keyed
-- task) is locked by a statement of its own, with nothing to order or prepare.
CREATE PROCEDURE keys_lock(IN p_namespace_id BIGINT UNSIGNED, IN p_keys MEDIUMTEXT,
                           IN p_skip TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_list MEDIUMTEXT DEFAULT NULL;
  DECLARE v_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  IF JSON_LENGTH(p_keys) = 1 THEN
    -- One key has no order to keep: a statement of its own. Making the list and preparing
    -- a statement for it took 107 of the 145 µs a report of one keyed result spent locking
    -- its key (performance_schema, a hot key's turns).
    SET v_key = JSON_UNQUOTE(JSON_EXTRACT(p_keys, '$[0]'));
    IF p_skip THEN
      DELETE FROM locked_keys_mem;
      INSERT INTO locked_keys_mem (concurrency_key)
      SELECT concurrency_key FROM concurrency_resources FORCE INDEX (uq_concurrency_resources_key)
       WHERE namespace_id = p_namespace_id AND concurrency_key = v_key AND v_key <> ''
         FOR UPDATE SKIP LOCKED;
    ELSE
      SELECT COUNT(*) INTO @orbit_keys_locked
        FROM concurrency_resources FORCE INDEX (uq_concurrency_resources_key)
       WHERE namespace_id = p_namespace_id AND concurrency_key = v_key AND v_key <> ''
         FOR UPDATE;
    END IF;
  ELSE
    IF @@sql_mode LIKE '%NO_BACKSLASH_ESCAPES%' THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: keys_lock needs backslash escapes';
    END IF;
    -- MySQL 8 cuts GROUP_CONCAT at 1,024 bytes by default; 100 keys of 191 characters need 80 KB.
    IF @@session.group_concat_max_len < 1048576 THEN
      SET SESSION group_concat_max_len = 1048576;
    END IF;
    SELECT GROUP_CONCAT(CONCAT('_utf8mb4 ', QUOTE(j.k)) SEPARATOR ',')
      INTO v_list
      FROM JSON_TABLE(p_keys, '$[*]' COLUMNS (
             k VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) j
     WHERE j.k <> '';
    IF v_list IS NOT NULL THEN
      IF p_skip THEN
        DELETE FROM locked_keys_mem;
        SET @orbit_keys_sql = CONCAT(
          'INSERT INTO locked_keys_mem (concurrency_key) SELECT concurrency_key FROM concurrency_resources ',
          'FORCE INDEX (uq_concurrency_resources_key) WHERE namespace_id = ', p_namespace_id,
          ' AND concurrency_key IN (', v_list, ') FOR UPDATE SKIP LOCKED');
      ELSE
        SET @orbit_keys_sql = CONCAT(
          'SELECT COUNT(*) INTO @orbit_keys_locked FROM concurrency_resources ',
          'FORCE INDEX (uq_concurrency_resources_key) WHERE namespace_id = ', p_namespace_id,
          ' AND concurrency_key IN (', v_list, ') FOR UPDATE');
      END IF;
      PREPARE orbit_keys_stmt FROM @orbit_keys_sql;
      EXECUTE orbit_keys_stmt;
      DEALLOCATE PREPARE orbit_keys_stmt;
    END IF;
  END IF;
END
