-- depends: 000018_key_floors
-- Why a task was cancelled (P5, V1), a column added at the end of the table, which both
-- dialects do in place without copying it. Tasks cancelled before it have it NULL: until now
-- only a cancel ended a task CANCELLED, and the reads say so (CANCELLED_BY_USER), so no row
-- is rewritten.

ALTER TABLE tasks
  ADD COLUMN cancel_reason ENUM('CANCELLED_BY_USER', 'KEY_BUSY', 'REPLACED') NULL DEFAULT NULL
    COMMENT 'Why a CANCELLED task was: a cancel (CANCELLED_BY_USER), if_busy skip on a busy key (KEY_BUSY), a replace (REPLACED); NULL otherwise, and on tasks cancelled before this column (all by a cancel)';
