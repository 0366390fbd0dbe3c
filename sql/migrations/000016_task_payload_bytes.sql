-- depends: 000015_permits_one_index
-- A task's payload size, written at submission, for the claim's payload budget (L1): a claim's
-- grants carry at most 1 MiB of payload together, and reading each candidate's payload to
-- measure it read a backlog of large payloads whole on every claim. Appended last, so that
-- MariaDB 10.3+ and MySQL 8.0 add it instantly, without rebuilding the table. Tasks submitted
-- before it (or by the routines of the version before it, during a rolling upgrade) keep NULL
-- and are measured by reading their payload.

ALTER TABLE tasks
  ADD COLUMN payload_bytes INT UNSIGNED NULL COMMENT 'Bytes of the payload text, written at submission; NULL: submitted before this column, measured with LENGTH(payload)';
