-- depends: 000017_retention
-- Key rows reclaimed without a token going back (R5, K7). A namespace's keys are split into 16
-- stripes by CRC32 of the key; each stripe's floor is at least the highest token of every key
-- row of the stripe ever deleted, raised in the deleting transaction, and a key row created
-- afterwards starts at its stripe's floor, read under a shared lock. Stripes, not one row per
-- namespace: a deletion holds one stripe's floor and so holds back only the creation of new
-- keys of that stripe. The rows of existing namespaces are made here; bootstrap makes a new
-- namespace's (and the routines make them for a namespace that lacks them). The index finds
-- the key rows that have been idle longest.

CREATE TABLE key_floors (
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Namespace (namespaces.id)',
  stripe TINYINT UNSIGNED NOT NULL COMMENT 'CRC32(concurrency_key) MOD 16: the keys this floor is for',
  floor BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'At least the highest token of every key row of the stripe ever deleted; a key row made later starts here (R5)',
  PRIMARY KEY (namespace_id, stripe)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Token floors of reclaimed key rows, 16 stripes per namespace; never lowered';

INSERT INTO key_floors (namespace_id, stripe)
SELECT n.id, s.stripe FROM namespaces n
  CROSS JOIN (SELECT 0 AS stripe UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
              UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
              UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
              UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) s;

ALTER TABLE concurrency_resources
  ADD INDEX ix_concurrency_resources_idle (namespace_id, updated_at),
  COMMENT = 'One row per (namespace, key) in use; an idle one may be deleted (R5), its stripe''s floor raised first, so tokens only grow';
