-- attempt_start_tables: the group table of attempt_start_group, start_group_mem, made (once per
-- connection) and emptied. Called before the transaction (some DDL commits implicitly,
-- sql/README.md, "Set-based paths"): by attempt_start_many, and through worker_claim_tables
-- by the claims that start what they grant.
CREATE PROCEDURE attempt_start_tables()
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  CREATE TEMPORARY TABLE IF NOT EXISTS start_group_mem (
    seq BIGINT UNSIGNED NOT NULL PRIMARY KEY, attempt_id BIGINT UNSIGNED NOT NULL,
    task_id BIGINT UNSIGNED NOT NULL, token BIGINT UNSIGNED NOT NULL
  ) ENGINE=MEMORY;
  DELETE FROM start_group_mem;
END
