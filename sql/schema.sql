-- The current schema, generated from a database built by sql/migrations with
-- `orbit-migrate snapshot > sql/schema.sql` (MariaDB's SHOW CREATE TABLE). Read it;
-- never apply it: migrations make databases. tests/migration checks it is current.

CREATE TABLE `applications` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `name` varchar(100) NOT NULL COMMENT 'Unique application name',
  `max_active_attempts` int(10) unsigned DEFAULT NULL COMMENT 'Application quota: attempts in LEASED or RUNNING at once; NULL = unlimited',
  `max_unfinished` int(10) unsigned DEFAULT NULL COMMENT 'Backlog quota: tasks not yet in a final state; NULL = unlimited',
  `active_attempts` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Attempts holding permits now (each counted once, keyed or not); kept while max_active_attempts is set',
  `unfinished_tasks` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Tasks accepted and not yet final (NEEDS_REVIEW counts); kept while max_unfinished is set',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC, database clock',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_applications_name` (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Tenants; the row is locked only by writers under a quota';

CREATE TABLE `attempts` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex',
  `task_id` bigint(20) unsigned NOT NULL COMMENT 'tasks.id',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace, denormalised for scoped reads',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Application, denormalised for the lock order',
  `queue_id` bigint(20) unsigned NOT NULL COMMENT 'Queue, denormalised for the lock order',
  `session_id` bigint(20) unsigned NOT NULL COMMENT 'worker_sessions.id that claimed it',
  `attempt_number` int(10) unsigned NOT NULL COMMENT '1-based attempt number within the task',
  `concurrency_token` bigint(20) unsigned NOT NULL DEFAULT 0 COMMENT 'Fencing token of a keyed attempt (K7); 0 = task has no key',
  `state` enum('LEASED','RUNNING','SUCCEEDED','FAILED','RETRY','EXPIRED','UNKNOWN','CANCELLED') NOT NULL COMMENT 'Attempt state (SPEC 3)',
  `lease_expires_at` datetime(6) NOT NULL COMMENT 'Lease end on the database clock; past it the attempt is recovered',
  `outcome` varchar(16) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'Reported outcome: succeeded, failed, unknown',
  `retryable` tinyint(1) DEFAULT NULL COMMENT 'Reported retryable flag for failed outcomes',
  `result` mediumtext DEFAULT NULL COMMENT 'Reported result JSON',
  `error` mediumtext DEFAULT NULL COMMENT 'Reported error JSON',
  `result_sha256` char(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'Fingerprint of the reported result; a repeat with the same one is a duplicate',
  `created_at` datetime(6) NOT NULL COMMENT 'Claim time, UTC',
  `started_at` datetime(6) DEFAULT NULL COMMENT 'Start confirmation time',
  `finished_at` datetime(6) DEFAULT NULL COMMENT 'When it left LEASED/RUNNING',
  `concurrency_slot` smallint(5) unsigned NOT NULL DEFAULT 0 COMMENT 'Slot of the key permit (P2), 0 to key_limit - 1; 0 for an unkeyed attempt',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_attempts_public_id` (`public_id`),
  UNIQUE KEY `uq_attempts_number` (`task_id`,`attempt_number`),
  KEY `ix_attempts_lease` (`state`,`lease_expires_at`),
  KEY `ix_attempts_session` (`session_id`,`state`),
  KEY `ix_attempts_queue_lease` (`queue_id`,`state`,`lease_expires_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Execution attempts; one per claim';

CREATE TABLE `concurrency_resources` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace of the key; tokens of different namespaces are unrelated',
  `concurrency_key` varchar(191) NOT NULL COMMENT 'The resource key, byte exact',
  `token` bigint(20) unsigned NOT NULL DEFAULT 0 COMMENT 'Highest token issued; the next permit gets a larger one; never reset or wrapped',
  `version` bigint(20) unsigned NOT NULL DEFAULT 0 COMMENT 'Advanced by every claim and release of the key',
  `holder_attempt_id` bigint(20) unsigned DEFAULT NULL COMMENT 'attempts.id holding the key permit; NULL = free',
  `candidate_task_id` bigint(20) unsigned DEFAULT NULL COMMENT 'The one READY task of this key while it is free (parking invariant)',
  `waiting_since` datetime(6) DEFAULT NULL COMMENT 'Since when tasks have waited for this key without a break (UTC); NULL = none waits',
  `created_at` datetime(6) NOT NULL COMMENT 'First use of the key, UTC',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last claim or release, UTC',
  `key_limit` smallint(5) unsigned NOT NULL DEFAULT 1 COMMENT 'Holders admitted at once: the policy in force (key_policies), kept by every policy change; 1 without one',
  `slot_holders` smallint(5) unsigned NOT NULL DEFAULT 0 COMMENT 'Held slots of key_slots (slots 1..); the key has room while (holder_attempt_id IS NOT NULL) + slot_holders < key_limit',
  `rate_permits` int(10) unsigned DEFAULT NULL COMMENT 'The rate in force (key_policies), kept by every policy change; NULL = none',
  `rate_seconds` int(10) unsigned DEFAULT NULL COMMENT 'The window of rate_permits, seconds',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_concurrency_resources_key` (`namespace_id`,`concurrency_key`),
  KEY `ix_concurrency_resources_waiting` (`namespace_id`,`waiting_since`),
  KEY `ix_concurrency_resources_idle` (`namespace_id`,`updated_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per (namespace, key) in use; an idle one may be deleted (R5), its stripe''s floor raised first, so tokens only grow';

CREATE TABLE `credential_queues` (
  `credential_id` bigint(20) unsigned NOT NULL COMMENT 'credentials.id',
  `queue_id` bigint(20) unsigned NOT NULL COMMENT 'queues.id the credential may use when all_queues = 0',
  PRIMARY KEY (`credential_id`,`queue_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queue scope of credentials limited to a list of queues';

CREATE TABLE `credentials` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Lookup id embedded in the bearer token (not secret)',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Bound application',
  `environment_id` bigint(20) unsigned NOT NULL COMMENT 'Bound environment',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Bound namespace: every request is confined to it',
  `secret_sha256` char(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 hex of the whole token; the token itself is never stored',
  `scopes` varchar(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Comma-separated scopes (queues:manage, tasks:submit, ...)',
  `all_queues` tinyint(1) NOT NULL DEFAULT 1 COMMENT '1 = every queue of the namespace; 0 = only credential_queues',
  `label` varchar(200) NOT NULL DEFAULT '' COMMENT 'Free text for operators',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  `revoked_at` datetime(6) DEFAULT NULL COMMENT 'When revoked; revoked credentials are refused',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_credentials_public_id` (`public_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Bearer credentials; only a hash of the secret is kept';

CREATE TABLE `environments` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Owning application (applications.id)',
  `name` varchar(100) NOT NULL COMMENT 'Name, unique within the application',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_environments_name` (`application_id`,`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Environments of an application (test, production, ...)';

CREATE TABLE `idempotency_records` (
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace the key belongs to',
  `idempotency_key` varchar(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Idempotency-Key header, byte exact',
  `fingerprint` char(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 of the normalised request; a different one is IDEMPOTENCY_CONFLICT',
  `task_id` bigint(20) unsigned NOT NULL COMMENT 'tasks.id created by the first acceptance',
  `created_at` datetime(6) NOT NULL COMMENT 'First acceptance, UTC',
  PRIMARY KEY (`namespace_id`,`idempotency_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per accepted command; the primary key makes concurrent duplicates collide';

CREATE TABLE `key_floors` (
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace (namespaces.id)',
  `stripe` tinyint(3) unsigned NOT NULL COMMENT 'CRC32(concurrency_key) MOD 16: the keys this floor is for',
  `floor` bigint(20) unsigned NOT NULL DEFAULT 0 COMMENT 'At least the highest token of every key row of the stripe ever deleted; a key row made later starts here (R5)',
  PRIMARY KEY (`namespace_id`,`stripe`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Token floors of reclaimed key rows, 16 stripes per namespace; never lowered';

CREATE TABLE `key_policies` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex (policy_id)',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace whose keys the rule matches (namespaces.id)',
  `match_kind` enum('KEY','PREFIX') NOT NULL COMMENT 'KEY: the key equals pattern; PREFIX: the key starts with pattern (the longest matching prefix wins; a KEY rule beats any prefix)',
  `pattern` varchar(191) NOT NULL COMMENT 'The key, or the prefix, byte exact (K2 rules)',
  `key_limit` smallint(5) unsigned NOT NULL COMMENT 'Holders the matching keys admit at once, 1 to 1000 (P1)',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last change, UTC',
  `rate_permits` int(10) unsigned DEFAULT NULL COMMENT 'At most this many permits of a matching key begin in any rate_seconds (P6); NULL = no rate',
  `rate_seconds` int(10) unsigned DEFAULT NULL COMMENT 'The window of rate_permits, seconds; NULL with it',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_key_policies_public_id` (`public_id`),
  UNIQUE KEY `uq_key_policies_rule` (`namespace_id`,`match_kind`,`pattern`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Key policies: a limit per exact key or key prefix; no rule means limit 1';

CREATE TABLE `key_rate_grants` (
  `resource_id` bigint(20) unsigned NOT NULL COMMENT 'concurrency_resources.id of a key with a rate',
  `n` int(10) unsigned NOT NULL COMMENT 'Ring position, 0 to rate_permits - 1, made densely',
  `granted_at` datetime(6) NOT NULL COMMENT 'When a permit of the key began (its grant), UTC; the oldest is overwritten by the next',
  PRIMARY KEY (`resource_id`,`n`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='The latest grant times of keys with a rate; locked after their key row, deleted with it';

CREATE TABLE `key_slots` (
  `resource_id` bigint(20) unsigned NOT NULL COMMENT 'concurrency_resources.id of the key',
  `slot` smallint(5) unsigned NOT NULL COMMENT 'Slot number, 1 and up (slot 0 is the key row''s holder_attempt_id); made densely, lowest first',
  `attempt_id` bigint(20) unsigned DEFAULT NULL COMMENT 'attempts.id holding the slot; NULL = free',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last grant or release of the slot, UTC',
  PRIMARY KEY (`resource_id`,`slot`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Slots 1.. of keys whose limit is above 1; locked after their key row, deleted with it';

CREATE TABLE `namespace_gates` (
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace the gate admits writers of (namespaces.id)',
  `slot` tinyint(3) unsigned NOT NULL COMMENT 'Gate number, 0-31; a writer takes the first free one',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Application of the namespace, read with the gate',
  `active_limited` tinyint(1) NOT NULL DEFAULT 0 COMMENT '1 = the application has max_active_attempts: claims and releases lock its row and keep active_attempts',
  `unfinished_limited` tinyint(1) NOT NULL DEFAULT 0 COMMENT '1 = the application has max_unfinished: submissions and final states lock its row and keep unfinished_tasks',
  PRIMARY KEY (`namespace_id`,`slot`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Per-namespace gates: a writer holds one, a limit or queue-state change holds all';

CREATE TABLE `namespaces` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id; the isolation domain of tasks, queues, keys and tokens',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Owning application (applications.id)',
  `environment_id` bigint(20) unsigned NOT NULL COMMENT 'Owning environment (environments.id)',
  `name` varchar(100) NOT NULL COMMENT 'Name, unique within the environment',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  `retention_seconds` int(10) unsigned NOT NULL DEFAULT 604800 COMMENT 'Finished tasks (with their attempts, history and Idempotency-Key) are deleted once finished this long (R1, R2); default 7 days',
  `keys_idle_seconds` int(10) unsigned DEFAULT NULL COMMENT 'Key rows idle this long may be reclaimed (R5); NULL = retention_seconds',
  `cleaned_at` datetime(6) DEFAULT NULL COMMENT 'When the last full cleanup pass of the namespace ended, UTC; NULL = never',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_namespaces_name` (`environment_id`,`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Isolation domains; nothing is visible across namespaces';

CREATE TABLE `orbit_meta` (
  `meta_key` varchar(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Setting name',
  `meta_value` varchar(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Setting value',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last write, UTC',
  PRIMARY KEY (`meta_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Installation facts such as the digest of the installed routines';

CREATE TABLE `permits` (
  `attempt_id` bigint(20) unsigned NOT NULL COMMENT 'attempts.id holding the permit',
  `kind` enum('QUEUE','KEY') NOT NULL COMMENT 'QUEUE or KEY; the application quota is a counter, counted once per attempt',
  `scope_id` bigint(20) unsigned NOT NULL COMMENT 'queues.id for QUEUE permits, concurrency_resources.id for KEY permits',
  `exclusive_resource_id` bigint(20) unsigned DEFAULT NULL COMMENT 'concurrency_resources.id for KEY permits, NULL otherwise (as scope_id; not indexed: the key row''s holder is the guard)',
  `expires_at` datetime(6) NOT NULL COMMENT 'Follows the attempt lease; extended by renew',
  `created_at` datetime(6) NOT NULL COMMENT 'Grant time, UTC',
  PRIMARY KEY (`attempt_id`,`kind`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Permits held by LEASED and RUNNING attempts; keyed by attempt, no AUTO_INCREMENT and no index a claim could wait in';

CREATE TABLE `queues` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id: 32 lowercase hex characters',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Owning namespace (namespaces.id)',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Owning application, denormalised for the lock order',
  `name` varchar(100) NOT NULL COMMENT 'Name, unique within the namespace',
  `state` enum('ACTIVE','PAUSED') NOT NULL DEFAULT 'ACTIVE' COMMENT 'PAUSED queues are not claimed from; nothing held is released',
  `max_concurrency` int(10) unsigned DEFAULT NULL COMMENT 'Queue permits: attempts in LEASED or RUNNING at once; NULL = unlimited',
  `max_unfinished` int(10) unsigned DEFAULT NULL COMMENT 'Backlog quota of the queue; NULL = unlimited',
  `max_attempts` int(10) unsigned NOT NULL DEFAULT 3 COMMENT 'Default attempts per task',
  `lease_seconds` int(10) unsigned NOT NULL DEFAULT 30 COMMENT 'Lease granted by claim and renew, seconds',
  `retry_backoff_seconds` int(10) unsigned NOT NULL DEFAULT 1 COMMENT 'Base of the exponential retry backoff, seconds',
  `retry_backoff_max_seconds` int(10) unsigned NOT NULL DEFAULT 300 COMMENT 'Cap of the retry backoff, seconds',
  `active_attempts` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Queue permits held now; kept when max_concurrency is set',
  `unfinished_tasks` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Tasks of this queue not yet final; kept when max_unfinished is set',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last settings or state change, UTC',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_queues_public_id` (`public_id`),
  UNIQUE KEY `uq_queues_name` (`namespace_id`,`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queues of a namespace with their permits and quotas';

CREATE TABLE `schedule_fires` (
  `schedule_id` bigint(20) unsigned NOT NULL COMMENT 'schedules.id',
  `fire_time` datetime(6) NOT NULL COMMENT 'Nominal fire time, UTC; the key makes each fire create one task',
  `version` int(10) unsigned NOT NULL COMMENT 'Version used for the fire',
  `task_id` bigint(20) unsigned DEFAULT NULL COMMENT 'tasks.id created by the fire (NULL when refused by a quota)',
  `created_at` datetime(6) NOT NULL COMMENT 'When the fire was recorded',
  PRIMARY KEY (`schedule_id`,`fire_time`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per executed fire';

CREATE TABLE `schedule_versions` (
  `schedule_id` bigint(20) unsigned NOT NULL COMMENT 'schedules.id',
  `version` int(10) unsigned NOT NULL COMMENT '1-based version number',
  `rule_kind` enum('CRON','INTERVAL') NOT NULL COMMENT 'Rule type',
  `cron` varchar(120) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'Cron expression for CRON rules',
  `timezone` varchar(64) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'IANA time zone of the cron rule',
  `interval_seconds` int(10) unsigned DEFAULT NULL COMMENT 'Period for INTERVAL rules',
  `definition` mediumtext NOT NULL COMMENT 'Definition JSON: {task: {...}} with fixed values, no templates',
  `effective_from` datetime(6) NOT NULL COMMENT 'Applies to fires at or after this time',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  PRIMARY KEY (`schedule_id`,`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Immutable schedule versions';

CREATE TABLE `schedules` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Owning namespace',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Owning application',
  `name` varchar(100) NOT NULL COMMENT 'Name, unique within the namespace',
  `state` enum('ACTIVE','PAUSED','DELETED') NOT NULL DEFAULT 'ACTIVE' COMMENT 'Only ACTIVE schedules fire; DELETED keeps history',
  `current_version` int(10) unsigned NOT NULL COMMENT 'Latest schedule_versions.version',
  `next_fire_at` datetime(6) DEFAULT NULL COMMENT 'Next due fire time, UTC; set by the scheduler',
  `created_at` datetime(6) NOT NULL COMMENT 'Creation time, UTC',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last change, UTC',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_schedules_public_id` (`public_id`),
  UNIQUE KEY `uq_schedules_name` (`namespace_id`,`name`),
  KEY `ix_schedules_due` (`state`,`next_fire_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Recurring task producers';

CREATE TABLE `task_history` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id, orders the history',
  `task_id` bigint(20) unsigned NOT NULL COMMENT 'tasks.id',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace, for scoped reads',
  `attempt_id` bigint(20) unsigned DEFAULT NULL COMMENT 'attempts.id concerned, if any',
  `concurrency_token` bigint(20) unsigned DEFAULT NULL COMMENT 'Token of the attempt concerned, for keyed tasks',
  `event` varchar(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'What happened: SUBMITTED, CLAIMED, STARTED, ...',
  `from_state` varchar(20) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'Task state before',
  `to_state` varchar(20) CHARACTER SET ascii COLLATE ascii_bin DEFAULT NULL COMMENT 'Task state after',
  `actor` varchar(200) NOT NULL COMMENT 'Who: credential:<id>, session:<id>, system:<part>',
  `details` varchar(1000) DEFAULT NULL COMMENT 'Short free text',
  `created_at` datetime(6) NOT NULL COMMENT 'When, UTC',
  PRIMARY KEY (`id`),
  KEY `ix_task_history_task` (`task_id`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Append-only log of every task state change';

CREATE TABLE `tasks` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id; ends every claim ORDER BY',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Owning namespace',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Owning application (quota accounting)',
  `queue_id` bigint(20) unsigned NOT NULL COMMENT 'queues.id',
  `idempotency_key` varchar(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Idempotency-Key of the accepting command',
  `handler` varchar(200) NOT NULL COMMENT 'Handler name the worker dispatches on',
  `handler_version` varchar(64) NOT NULL COMMENT 'Handler version',
  `payload_version` varchar(64) NOT NULL COMMENT 'Version of the payload schema',
  `payload` mediumtext NOT NULL COMMENT 'Payload as canonical JSON text',
  `business_key` varchar(191) NOT NULL DEFAULT '' COMMENT 'Tracing only: never limits concurrency, never deduplicates (K1)',
  `concurrency_key` varchar(191) NOT NULL DEFAULT '' COMMENT 'Resource key frozen at acceptance; empty = none (K1-K3). Byte-exact: utf8mb4_bin, and K2 forbids the trailing spaces PAD SPACE would ignore',
  `priority` tinyint(3) unsigned NOT NULL DEFAULT 5 COMMENT '0 (first) to 9 (last)',
  `state` enum('WAITING','LEASED','RUNNING','SUCCEEDED','FAILED','CANCELLED','NEEDS_REVIEW','DEADLINE_EXCEEDED') NOT NULL COMMENT 'Task state (SPEC 3)',
  `lane` enum('READY','DELAYED','BLOCKED') DEFAULT NULL COMMENT 'Dispatch lane of a WAITING task; NULL otherwise. Only READY rows are claimable',
  `max_attempts` int(10) unsigned NOT NULL COMMENT 'Attempts allowed',
  `attempts_used` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Attempts created so far',
  `available_at` datetime(6) NOT NULL COMMENT 'Not claimable before this time (retry backoff), UTC',
  `deadline_at` datetime(6) DEFAULT NULL COMMENT 'Absolute total deadline counted from acceptance; NULL = none',
  `current_attempt_id` bigint(20) unsigned DEFAULT NULL COMMENT 'attempts.id of the latest attempt',
  `result` mediumtext DEFAULT NULL COMMENT 'Final result JSON reported by the worker',
  `error` mediumtext DEFAULT NULL COMMENT 'Last error JSON reported by the worker',
  `schedule_id` bigint(20) unsigned DEFAULT NULL COMMENT 'schedules.id when generated by a schedule',
  `schedule_version` int(10) unsigned DEFAULT NULL COMMENT 'Schedule version that generated the task',
  `fire_time` datetime(6) DEFAULT NULL COMMENT 'Schedule fire time that generated the task, UTC',
  `created_at` datetime(6) NOT NULL COMMENT 'Acceptance time, UTC',
  `updated_at` datetime(6) NOT NULL COMMENT 'Last state change, UTC',
  `finished_at` datetime(6) DEFAULT NULL COMMENT 'When the task reached a final state',
  `payload_bytes` int(10) unsigned DEFAULT NULL COMMENT 'Bytes of the payload text, written at submission; NULL: submitted before this column, measured with LENGTH(payload)',
  `cancel_reason` enum('CANCELLED_BY_USER','KEY_BUSY','REPLACED') DEFAULT NULL COMMENT 'Why a CANCELLED task was: a cancel (CANCELLED_BY_USER), if_busy skip on a busy key (KEY_BUSY), a replace (REPLACED); NULL otherwise, and on tasks cancelled before this column (all by a cancel)',
  `replaced_by_task_id` bigint(20) unsigned DEFAULT NULL COMMENT 'tasks.id of the submission that replaced this task (cancel_reason REPLACED); NULL otherwise',
  `burst_started_at` datetime(6) DEFAULT NULL COMMENT 'A debounced task: when the burst of submissions it continues began (its first, or the earliest a replaced task carried), UTC; NULL otherwise',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_tasks_public_id` (`public_id`),
  KEY `ix_tasks_claim` (`queue_id`,`lane`,`priority`,`id`),
  KEY `ix_tasks_due` (`lane`,`available_at`),
  KEY `ix_tasks_deadline` (`lane`,`deadline_at`),
  KEY `ix_tasks_ns_state` (`namespace_id`,`state`,`id`),
  KEY `ix_tasks_ns_business` (`namespace_id`,`business_key`,`id`),
  KEY `ix_tasks_ns_queue` (`namespace_id`,`queue_id`,`id`),
  KEY `ix_tasks_key_lane` (`namespace_id`,`concurrency_key`,`lane`,`priority`,`id`),
  KEY `ix_tasks_queue_due` (`queue_id`,`lane`,`available_at`),
  KEY `ix_tasks_queue_lane_key` (`queue_id`,`lane`,`concurrency_key`,`priority`,`id`),
  KEY `ix_tasks_ns` (`namespace_id`,`id`),
  KEY `ix_tasks_ns_key` (`namespace_id`,`concurrency_key`,`id`),
  KEY `ix_tasks_ns_finished` (`namespace_id`,`state`,`finished_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Accepted tasks; a finished one is deleted once its namespace''s retention has passed (R1)';

CREATE TABLE `token_epoch` (
  `id` tinyint(3) unsigned NOT NULL COMMENT 'Always 1: one row',
  `epoch` int(10) unsigned NOT NULL COMMENT 'Epoch of this primary: tokens granted now lie in [epoch << 40, (epoch + 1) << 40); only orbit-admin promote advances it',
  `advanced_at` datetime(6) DEFAULT NULL COMMENT 'When the epoch was last advanced (UTC); NULL = never',
  `note` varchar(255) NOT NULL DEFAULT '' COMMENT 'What advanced it (the promote command says from which server)',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='The token epoch of this database (H1); replicated with everything else';

CREATE TABLE `worker_accounts` (
  `account_user` varchar(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'MySQL user name of a direct worker account (the part of USER() before @)',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'A namespace the account may act for (namespaces.id)',
  `created_at` datetime(6) NOT NULL COMMENT 'When the binding was made (UTC)',
  PRIMARY KEY (`account_user`,`namespace_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Namespaces each direct worker account is bound to; an account listed here acts for no other';

CREATE TABLE `worker_session_queues` (
  `session_id` bigint(20) unsigned NOT NULL COMMENT 'worker_sessions.id',
  `queue_id` bigint(20) unsigned NOT NULL COMMENT 'queues.id consumed by the session',
  PRIMARY KEY (`session_id`,`queue_id`),
  KEY `ix_worker_session_queues_queue` (`queue_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queues a session claims from';

CREATE TABLE `worker_sessions` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  `public_id` char(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public session id, 32 lowercase hex',
  `namespace_id` bigint(20) unsigned NOT NULL COMMENT 'Namespace the worker serves',
  `application_id` bigint(20) unsigned NOT NULL COMMENT 'Application, denormalised for the lock order',
  `worker_id` varchar(191) NOT NULL COMMENT 'Stable worker identity chosen by the process',
  `capacity` int(10) unsigned NOT NULL COMMENT 'Attempts the worker runs at once',
  `concurrency_keys` tinyint(1) NOT NULL DEFAULT 0 COMMENT 'Fixed per identity: 1 = may receive keyed tasks (W1)',
  `in_flight` int(10) unsigned NOT NULL DEFAULT 0 COMMENT 'Attempts of this session in LEASED or RUNNING',
  `state` enum('OPEN','CLOSED') NOT NULL DEFAULT 'OPEN' COMMENT 'CLOSED after goodbye; hello reopens',
  `registration_sha256` char(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Fingerprint of queues and capacity at hello',
  `created_at` datetime(6) NOT NULL COMMENT 'First hello, UTC',
  `last_seen_at` datetime(6) NOT NULL COMMENT 'Last hello, claim or goodbye, UTC',
  `closed_at` datetime(6) DEFAULT NULL COMMENT 'Goodbye time',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uq_worker_sessions_public_id` (`public_id`),
  UNIQUE KEY `uq_worker_sessions_identity` (`namespace_id`,`worker_id`),
  KEY `ix_worker_sessions_seen` (`namespace_id`,`last_seen_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per worker identity';
