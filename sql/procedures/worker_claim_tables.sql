-- worker_claim_tables: the candidates table of worker_claim_grant, its keys' next tasks, and
-- the key rows table of keys_lock, made (once per connection) and emptied. Called before the transaction: some DDL
-- commits implicitly (sql/README.md, "Set-based paths"). The candidates table is named anew
-- whenever its columns change (a connection keeps the table it made).
CREATE PROCEDURE worker_claim_tables()
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CREATE TEMPORARY TABLE IF NOT EXISTS claim_grants_mem (
    task_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, priority TINYINT UNSIGNED NOT NULL,
    take TINYINT NOT NULL, queue_id BIGINT UNSIGNED NOT NULL,
    keyed TINYINT NOT NULL, late TINYINT NOT NULL,
    resource_id BIGINT UNSIGNED NOT NULL DEFAULT 0, token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    attempt_number INT UNSIGNED NOT NULL, attempt_id BIGINT UNSIGNED NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NOT NULL, payload_bytes INT UNSIGNED NOT NULL,
    -- P2: the grant's slot; slotted 1 when slot 0 is held and the slot is a key_slots row
    -- (new_slot 1: a row to make), room_after 1 when the key has room after the grant.
    slot SMALLINT UNSIGNED NOT NULL DEFAULT 0, slotted TINYINT NOT NULL DEFAULT 0,
    new_slot TINYINT NOT NULL DEFAULT 0, key_limit SMALLINT UNSIGNED NOT NULL DEFAULT 1,
    room_after TINYINT NOT NULL DEFAULT 0
  ) ENGINE=MEMORY;
  -- The next task of each key a grant left room in (P1), chosen by a read that locks nothing.
  CREATE TEMPORARY TABLE IF NOT EXISTS claim_next_mem (
    resource_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, next_task BIGINT UNSIGNED NOT NULL
  ) ENGINE=MEMORY;
  CREATE TEMPORARY TABLE IF NOT EXISTS locked_keys_mem (
    concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY
  ) ENGINE=MEMORY;
  DELETE FROM claim_grants_mem;
  DELETE FROM claim_next_mem;
  DELETE FROM locked_keys_mem;
END
