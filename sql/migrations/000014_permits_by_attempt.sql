-- depends: 000013_write_gates
-- Permits take no lock a claim of another key could wait for. A key's permit is deleted when
-- the key is released and inserted again when it is granted; while the old entry is
-- delete-marked, the uniqueness check of uq_permits_exclusive took shared next-key locks on it
-- and on the entry after it, and with innodb_autoinc_lock_mode 1 (MariaDB's default) a claim's
-- multi-row INSERT ... SELECT held the table's AUTO-INC lock to its end: claims of different
-- keys deadlocked over those gaps, over the AUTO-INC lock, and over a report's released
-- entries (sql/README.md, "Permits take no shared lock"). So the table loses its AUTO_INCREMENT
-- id (its key is (attempt_id, kind)) and the unique index on exclusive_resource_id; the key
-- row's holder, written only where there is none, is what refuses a second holder. No routine
-- reads permits.id or that index, and every insert names its columns, so the routines of the
-- previous version keep working on this table; uq_permits_attempt stays for their FORCE INDEX
-- until a later migration drops it.

ALTER TABLE permits
  DROP COLUMN id,
  DROP INDEX uq_permits_exclusive,
  ADD PRIMARY KEY (attempt_id, kind),
  MODIFY exclusive_resource_id BIGINT UNSIGNED DEFAULT NULL COMMENT 'concurrency_resources.id for KEY permits, NULL otherwise (as scope_id; not indexed: the key row''s holder is the guard)',
  COMMENT = 'Permits held by LEASED and RUNNING attempts; keyed by attempt, no AUTO_INCREMENT and no index a claim could wait in';
