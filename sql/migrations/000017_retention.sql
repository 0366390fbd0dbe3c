-- depends: 000016_task_payload_bytes
-- Retention (R1-R3): each namespace keeps finished work for a window, after which its cleanup
-- deletes it; a pass's time is kept per namespace for the cleanup-lag metric (R6). Columns
-- are appended, so MariaDB 10.3+ and MySQL 8.0 add them instantly. The index finds a
-- namespace's finished tasks by the time they finished, for each final state, so a pass
-- reads only what it deletes (finished_at is also set on a task that needs review or was
-- resolved back to WAITING: the state in front leaves those out).

ALTER TABLE namespaces
  ADD COLUMN retention_seconds INT UNSIGNED NOT NULL DEFAULT 604800 COMMENT 'Finished tasks (with their attempts, history and Idempotency-Key) are deleted once finished this long (R1, R2); default 7 days',
  ADD COLUMN keys_idle_seconds INT UNSIGNED NULL DEFAULT NULL COMMENT 'Key rows idle this long may be reclaimed (R5); NULL = retention_seconds',
  ADD COLUMN cleaned_at DATETIME(6) NULL DEFAULT NULL COMMENT 'When the last full cleanup pass of the namespace ended, UTC; NULL = never';

ALTER TABLE tasks
  ADD INDEX ix_tasks_ns_finished (namespace_id, state, finished_at),
  COMMENT = 'Accepted tasks; a finished one is deleted once its namespace''s retention has passed (R1)';
