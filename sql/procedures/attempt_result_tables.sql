-- attempt_result_tables: the group tables of attempt_result_apply, made (once per connection)
-- and emptied. Called before the transaction: some DDL commits implicitly (sql/README.md,
-- "Set-based paths").
CREATE PROCEDURE attempt_result_tables()
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  -- Named anew when its columns change: a connection keeps the table it made.
  CREATE TEMPORARY TABLE IF NOT EXISTS result_group_mem (
    seq INT NOT NULL PRIMARY KEY, attempt_id BIGINT UNSIGNED NOT NULL, task_id BIGINT UNSIGNED NOT NULL,
    queue_id BIGINT UNSIGNED NOT NULL, resource_id BIGINT UNSIGNED NOT NULL,
    token BIGINT UNSIGNED NOT NULL, fp CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state VARCHAR(10) NOT NULL, retryable TINYINT NOT NULL, started INT UNSIGNED NOT NULL,
    texts TINYINT NOT NULL DEFAULT 0, limits TINYINT UNSIGNED NOT NULL DEFAULT 0,
    delay DOUBLE NOT NULL DEFAULT 0, slot SMALLINT UNSIGNED NOT NULL DEFAULT 0
  ) ENGINE=MEMORY;
  -- Each freed key's next parked task, chosen by a read that locks nothing (INSERT ... SELECT
  -- reads its source consistently at READ COMMITTED); MySQL cannot open result_group_mem twice
  -- in one statement.
  CREATE TEMPORARY TABLE IF NOT EXISTS result_next_mem (
    resource_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, next_task BIGINT UNSIGNED NOT NULL
  ) ENGINE=MEMORY;
  DELETE FROM result_group_mem;
  DELETE FROM result_next_mem;
END
