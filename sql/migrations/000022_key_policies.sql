-- depends: 000021_debounce
-- Key policies (P1-P3): a key may admit up to its limit of holders, each on its own slot. The
-- limit in force is kept on the key row (key_limit), written when the row is made and by
-- every policy change, so a claim never matches rules. Slot 0 stays the key row's
-- holder_attempt_id; slots 1.. are rows of key_slots. Additive: every existing key has limit
-- 1 and every existing permit slot 0, which is what the columns' defaults say, so the
-- routines of the version before keep working on the tables of this one. The columns are
-- added at the end of their tables, instantly (ALGORITHM=INSTANT: the statement fails rather
-- than copy a table), so a busy server keeps serving while it runs.

CREATE TABLE key_policies (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex (policy_id)',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Namespace whose keys the rule matches (namespaces.id)',
  match_kind ENUM('KEY', 'PREFIX') NOT NULL COMMENT 'KEY: the key equals pattern; PREFIX: the key starts with pattern (the longest matching prefix wins; a KEY rule beats any prefix)',
  pattern VARCHAR(191) NOT NULL COMMENT 'The key, or the prefix, byte exact (K2 rules)',
  key_limit SMALLINT UNSIGNED NOT NULL COMMENT 'Holders the matching keys admit at once, 1 to 1000 (P1)',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last change, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_key_policies_public_id (public_id),
  UNIQUE KEY uq_key_policies_rule (namespace_id, match_kind, pattern)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Key policies: a limit per exact key or key prefix; no rule means limit 1';

CREATE TABLE key_slots (
  resource_id BIGINT UNSIGNED NOT NULL COMMENT 'concurrency_resources.id of the key',
  slot SMALLINT UNSIGNED NOT NULL COMMENT 'Slot number, 1 and up (slot 0 is the key row''s holder_attempt_id); made densely, lowest first',
  attempt_id BIGINT UNSIGNED DEFAULT NULL COMMENT 'attempts.id holding the slot; NULL = free',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last grant or release of the slot, UTC',
  PRIMARY KEY (resource_id, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Slots 1.. of keys whose limit is above 1; locked after their key row, deleted with it';

ALTER TABLE concurrency_resources
  ADD COLUMN key_limit SMALLINT UNSIGNED NOT NULL DEFAULT 1
    COMMENT 'Holders admitted at once: the policy in force (key_policies), kept by every policy change; 1 without one',
  ADD COLUMN slot_holders SMALLINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Held slots of key_slots (slots 1..); the key has room while (holder_attempt_id IS NOT NULL) + slot_holders < key_limit',
  ALGORITHM=INSTANT;

ALTER TABLE attempts
  ADD COLUMN concurrency_slot SMALLINT UNSIGNED NOT NULL DEFAULT 0
    COMMENT 'Slot of the key permit (P2), 0 to key_limit - 1; 0 for an unkeyed attempt',
  ALGORITHM=INSTANT;
