-- depends: 000012_token_epoch
-- Writers of one tenant no longer share a row. Every transaction that changes tasks, attempts
-- or keys takes one gate row of its namespace with SKIP LOCKED (so writers never wait for each
-- other) and reads there whether the application has quotas; the application and queue rows
-- are locked, and their counters kept, only where a limit is set. What changes a limit or a
-- queue's state takes every gate of the namespace first, so it waits for the writers in flight
-- and the writers after it see the change (sql/README.md, "Limits without a shared lock").

CREATE TABLE namespace_gates (
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Namespace the gate admits writers of (namespaces.id)',
  slot TINYINT UNSIGNED NOT NULL COMMENT 'Gate number, 0-31; a writer takes the first free one',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Application of the namespace, read with the gate',
  active_limited TINYINT(1) NOT NULL DEFAULT 0 COMMENT '1 = the application has max_active_attempts: claims and releases lock its row and keep active_attempts',
  unfinished_limited TINYINT(1) NOT NULL DEFAULT 0 COMMENT '1 = the application has max_unfinished: submissions and final states lock its row and keep unfinished_tasks',
  PRIMARY KEY (namespace_id, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Per-namespace gates: a writer holds one, a limit or queue-state change holds all';

INSERT INTO namespace_gates (namespace_id, slot, application_id, active_limited, unfinished_limited)
SELECT n.id, s.slot, n.application_id, a.max_active_attempts IS NOT NULL, a.max_unfinished IS NOT NULL
  FROM namespaces n
  JOIN applications a ON a.id = n.application_id
  CROSS JOIN (SELECT 0 AS slot UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
              UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
              UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
              UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15
              UNION ALL SELECT 16 UNION ALL SELECT 17 UNION ALL SELECT 18 UNION ALL SELECT 19
              UNION ALL SELECT 20 UNION ALL SELECT 21 UNION ALL SELECT 22 UNION ALL SELECT 23
              UNION ALL SELECT 24 UNION ALL SELECT 25 UNION ALL SELECT 26 UNION ALL SELECT 27
              UNION ALL SELECT 28 UNION ALL SELECT 29 UNION ALL SELECT 30 UNION ALL SELECT 31) s;

ALTER TABLE applications
  MODIFY active_attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Attempts holding permits now (each counted once, keyed or not); kept while max_active_attempts is set',
  MODIFY unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Tasks accepted and not yet final (NEEDS_REVIEW counts); kept while max_unfinished is set',
  COMMENT = 'Tenants; the row is locked only by writers under a quota';

ALTER TABLE queues
  MODIFY active_attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Queue permits held now; kept when max_concurrency is set',
  MODIFY unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Tasks of this queue not yet final; kept when max_unfinished is set';
