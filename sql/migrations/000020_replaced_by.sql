-- depends: 000019_cancel_reasons
-- The task that replaced a task (if_busy replace, P5), a column added at the end of the table
-- in place. A task replaced says so (cancel_reason REPLACED) and names its replacement.

ALTER TABLE tasks
  ADD COLUMN replaced_by_task_id BIGINT UNSIGNED NULL DEFAULT NULL
    COMMENT 'tasks.id of the submission that replaced this task (cancel_reason REPLACED); NULL otherwise';
