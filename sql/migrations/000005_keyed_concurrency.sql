-- depends: 000004_create_schedules
-- Keyed concurrency (K11): resource keys, key permits and fencing tokens.
-- Existing tasks get an empty key, existing attempts token 0, existing sessions
-- concurrency_keys = 0; business_key is untouched.

ALTER TABLE tasks
  ADD COLUMN concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' COMMENT 'Resource key frozen at acceptance; empty = none (K1-K3). Byte-exact: utf8mb4_bin, and K2 forbids the trailing spaces PAD SPACE would ignore' AFTER business_key,
  ADD KEY ix_tasks_key_lane (namespace_id, concurrency_key, lane, priority, id);

ALTER TABLE attempts
  ADD COLUMN concurrency_token BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Fencing token of a keyed attempt (K7); 0 = task has no key' AFTER attempt_number;

ALTER TABLE worker_sessions
  ADD COLUMN concurrency_keys TINYINT(1) NOT NULL DEFAULT 0 COMMENT 'Fixed per identity: 1 = may receive keyed tasks (W1)' AFTER capacity;

ALTER TABLE task_history
  ADD COLUMN concurrency_token BIGINT UNSIGNED NULL COMMENT 'Token of the attempt concerned, for keyed tasks' AFTER attempt_id;

ALTER TABLE permits
  MODIFY COLUMN kind ENUM('QUEUE','KEY') NOT NULL COMMENT 'QUEUE or KEY; the application quota is a counter, counted once per attempt',
  MODIFY COLUMN scope_id BIGINT UNSIGNED NOT NULL COMMENT 'queues.id for QUEUE permits, concurrency_resources.id for KEY permits',
  ADD COLUMN exclusive_resource_id BIGINT UNSIGNED NULL COMMENT 'concurrency_resources.id for KEY permits, NULL otherwise; unique, so the database itself refuses a second holder' AFTER scope_id,
  ADD UNIQUE KEY uq_permits_exclusive (exclusive_resource_id);

CREATE TABLE concurrency_resources (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Namespace of the key; tokens of different namespaces are unrelated',
  concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'The resource key, byte exact',
  token BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Highest token issued; the next permit gets a larger one; never reset or wrapped',
  version BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Advanced by every claim and release of the key',
  holder_attempt_id BIGINT UNSIGNED NULL COMMENT 'attempts.id holding the key permit; NULL = free',
  candidate_task_id BIGINT UNSIGNED NULL COMMENT 'The one READY task of this key while it is free (parking invariant)',
  created_at DATETIME(6) NOT NULL COMMENT 'First use of the key, UTC',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last claim or release, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_concurrency_resources_key (namespace_id, concurrency_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per (namespace, key); never deleted, so tokens only grow';

UPDATE tasks SET concurrency_key = '' WHERE concurrency_key <> '';
UPDATE attempts SET concurrency_token = 0 WHERE concurrency_token <> 0;
UPDATE worker_sessions SET concurrency_keys = 0 WHERE concurrency_keys <> 0;
