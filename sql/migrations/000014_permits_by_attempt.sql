-- depends: 000013_write_gates
-- Permits are keyed by (attempt_id, kind), without an AUTO_INCREMENT id. With
-- innodb_autoinc_lock_mode 1 (MariaDB's default) a multi-row INSERT ... SELECT holds the
-- table's AUTO-INC lock to its end, and the uniqueness check of a KEY permit on a key whose
-- previous permit is delete-marked takes a gap lock of uq_permits_exclusive: a claim that held
-- the AUTO-INC lock waited for such a gap while the gap's owner waited for the AUTO-INC lock,
-- a deadlock between claims of different keys (sql/README.md, "Lock order"). No routine reads
-- permits.id, and every insert names its columns, so the routines of the previous version keep
-- working on this table; uq_permits_attempt stays for their FORCE INDEX until a later
-- migration drops it.

ALTER TABLE permits
  DROP COLUMN id,
  ADD PRIMARY KEY (attempt_id, kind),
  COMMENT = 'Permits held by LEASED and RUNNING attempts; no AUTO_INCREMENT, so a claim never waits for a table lock while it holds a key gap';
