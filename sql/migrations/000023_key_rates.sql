-- depends: 000022_key_policies
-- A rate per key (P6): a key policy may say that at most rate_permits permits of its keys
-- begin in any rate_seconds seconds. The key row keeps the rate in force beside its limit,
-- and key_rate_grants the times of its latest permits, a ring of rate_permits rows. Additive;
-- the columns are added instantly at the end of their tables.

ALTER TABLE key_policies
  ADD COLUMN rate_permits INT UNSIGNED NULL DEFAULT NULL
    COMMENT 'At most this many permits of a matching key begin in any rate_seconds (P6); NULL = no rate',
  ADD COLUMN rate_seconds INT UNSIGNED NULL DEFAULT NULL
    COMMENT 'The window of rate_permits, seconds; NULL with it',
  ALGORITHM=INSTANT;

ALTER TABLE concurrency_resources
  ADD COLUMN rate_permits INT UNSIGNED NULL DEFAULT NULL
    COMMENT 'The rate in force (key_policies), kept by every policy change; NULL = none',
  ADD COLUMN rate_seconds INT UNSIGNED NULL DEFAULT NULL
    COMMENT 'The window of rate_permits, seconds',
  ALGORITHM=INSTANT;

CREATE TABLE key_rate_grants (
  resource_id BIGINT UNSIGNED NOT NULL COMMENT 'concurrency_resources.id of a key with a rate',
  n INT UNSIGNED NOT NULL COMMENT 'Ring position, 0 to rate_permits - 1, made densely',
  granted_at DATETIME(6) NOT NULL COMMENT 'When a permit of the key began (its grant), UTC; the oldest is overwritten by the next',
  PRIMARY KEY (resource_id, n)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='The latest grant times of keys with a rate; locked after their key row, deleted with it';
