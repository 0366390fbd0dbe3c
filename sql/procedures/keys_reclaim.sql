-- keys_reclaim: delete a batch of a namespace's idle key rows without any token going back
-- (R5, K7). A key row is idle when it has no holder, no READY candidate and nothing parked,
-- was last claimed or released longer ago than the namespace's key window
-- (keys_idle_seconds, else retention_seconds; 0: every idle key), and no task of the key is
-- unfinished or needs review. Each stripe of the batch is one transaction: its floor row is
-- locked and raised to at least the highest token of the rows it deletes before they are
-- deleted, and a key row created afterwards starts at that floor (key_floor, key_lane,
-- task_submit_many), so every token granted after a deletion exceeds every token granted
-- before it (and H1's epochs still hold: a grant is at least the epoch's first token).
-- Params: namespace; batch size (candidate rows read); where the previous batch of the pass
--   ended, (updated_at, id) of its last candidate (NULL, 0 to start): a pass walks the
--   candidates once, those it could not delete included.
-- Result set: {concurrency_resources, more, next_at, next_id}: rows deleted; 1 when the batch
--   was full, and where the next one starts.
-- Errors: NOT_FOUND (no such namespace).
-- Locks, per stripe: its key_floors row (exclusive: it waits for the creators of new keys of
--   the stripe that hold it shared, none of which waits for anything this holds), then the
--   stripe's candidate key rows with SKIP LOCKED (a key row a writer holds is busy: it is
--   left for a later pass, and this never waits for a key row), then their key_slots and
--   key_rate_grants rows (locked only ever after their key row).
CREATE PROCEDURE keys_reclaim(IN p_namespace_id BIGINT UNSIGNED, IN p_batch INT UNSIGNED,
                              IN p_after_at DATETIME(6), IN p_after_id BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_cutoff DATETIME(6) DEFAULT NULL;
  DECLARE v_found INT UNSIGNED DEFAULT 0;
  DECLARE v_deleted INT UNSIGNED DEFAULT 0;
  DECLARE v_stripe INT DEFAULT -1;
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE v_top BIGINT UNSIGNED;
  DECLARE v_next_at DATETIME(6) DEFAULT NULL;
  DECLARE v_next_id BIGINT UNSIGNED DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  CREATE TEMPORARY TABLE IF NOT EXISTS reclaim_keys_mem (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    stripe TINYINT UNSIGNED NOT NULL,
    updated_at DATETIME(6) NOT NULL,
    KEY (stripe)
  ) ENGINE = MEMORY;
  CREATE TEMPORARY TABLE IF NOT EXISTS reclaim_locked_mem (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    token BIGINT UNSIGNED NOT NULL
  ) ENGINE = MEMORY;
  DELETE FROM reclaim_keys_mem;
  SELECT UTC_TIMESTAMP(6) - INTERVAL COALESCE(keys_idle_seconds, retention_seconds) SECOND
    INTO v_cutoff FROM namespaces WHERE id = p_namespace_id;
  IF v_cutoff IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
  CALL key_floors_ensure(p_namespace_id);
  -- Candidates, idlest first: a plain read; each is checked again under its lock.
  -- (updated_at, id) is the index's order: its entries end with the primary key.
  INSERT INTO reclaim_keys_mem (id, stripe, updated_at)
  SELECT id, CRC32(concurrency_key) MOD 16, updated_at
    FROM concurrency_resources FORCE INDEX (ix_concurrency_resources_idle)
   WHERE namespace_id = p_namespace_id AND updated_at < v_cutoff
     AND (p_after_at IS NULL OR updated_at > p_after_at
          OR (updated_at = p_after_at AND id > p_after_id))
     AND holder_attempt_id IS NULL AND slot_holders = 0 AND candidate_task_id IS NULL
     AND waiting_since IS NULL
   ORDER BY updated_at, id LIMIT p_batch;
  SET v_found = ROW_COUNT();
  SELECT updated_at, id INTO v_next_at, v_next_id FROM reclaim_keys_mem
   ORDER BY updated_at DESC, id DESC LIMIT 1;
  stripes: LOOP
    SET v_stripe = (SELECT MIN(stripe) FROM reclaim_keys_mem WHERE stripe > v_stripe);
    IF v_stripe IS NULL THEN
      LEAVE stripes;
    END IF;
    DELETE FROM reclaim_locked_mem;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT floor INTO v_floor FROM key_floors
     WHERE namespace_id = p_namespace_id AND stripe = v_stripe FOR UPDATE;
    INSERT INTO reclaim_locked_mem (id, concurrency_key, token)
    SELECT r.id, r.concurrency_key, r.token
      FROM concurrency_resources r FORCE INDEX (PRIMARY)
     WHERE r.id IN (SELECT m.id FROM reclaim_keys_mem m WHERE m.stripe = v_stripe)
       AND r.holder_attempt_id IS NULL AND r.slot_holders = 0 AND r.candidate_task_id IS NULL
       -- a key with a rate keeps its row (and its grants' times) for its rate's window
       AND (r.rate_seconds IS NULL OR r.updated_at < UTC_TIMESTAMP(6) - INTERVAL r.rate_seconds SECOND)
       AND r.waiting_since IS NULL AND r.updated_at < v_cutoff
       FOR UPDATE SKIP LOCKED;
    -- A task of the key still to run, or to be resolved, keeps the row. No task of a key can
    -- be added while its row is locked: a submission locks the row first.
    DELETE m FROM reclaim_locked_mem m
     WHERE EXISTS (SELECT 1 FROM tasks t FORCE INDEX (ix_tasks_ns_key)
                    WHERE t.namespace_id = p_namespace_id
                      AND t.concurrency_key = m.concurrency_key
                      AND t.state IN ('WAITING', 'LEASED', 'RUNNING', 'NEEDS_REVIEW'));
    SELECT MAX(token) INTO v_top FROM reclaim_locked_mem;
    IF v_top IS NOT NULL THEN
      IF v_top > v_floor THEN
        UPDATE key_floors SET floor = v_top
         WHERE namespace_id = p_namespace_id AND stripe = v_stripe;
      END IF;
      DELETE r FROM reclaim_locked_mem m
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = m.id;
      SET v_deleted = v_deleted + ROW_COUNT();
      -- A key of limit above 1 leaves its slot rows (all free: no slot is held); a row made
      -- later for the key starts without them.
      DELETE s FROM reclaim_locked_mem m
        STRAIGHT_JOIN key_slots s FORCE INDEX (PRIMARY) ON s.resource_id = m.id;
      DELETE g FROM reclaim_locked_mem m
        STRAIGHT_JOIN key_rate_grants g FORCE INDEX (PRIMARY) ON g.resource_id = m.id;
    END IF;
    COMMIT;
  END LOOP;
  SELECT v_deleted AS concurrency_resources, v_found >= p_batch AS more,
         v_next_at AS next_at, v_next_id AS next_id;
END
