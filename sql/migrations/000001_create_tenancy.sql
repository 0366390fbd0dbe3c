-- Tenancy: application -> environment -> namespace -> queue, and the credentials bound to them.
-- Plain DDL only (yoyo splits this file with sqlparse); routines are installed by orbit-migrate.

CREATE TABLE applications (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Unique application name',
  max_active_attempts INT UNSIGNED NULL COMMENT 'Application quota: attempts in LEASED or RUNNING at once; NULL = unlimited',
  max_unfinished INT UNSIGNED NULL COMMENT 'Backlog quota: tasks not yet in a final state; NULL = unlimited',
  active_attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Attempts holding permits now (each counted once, keyed or not)',
  unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Tasks accepted and not yet final (NEEDS_REVIEW counts)',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC, database clock',
  PRIMARY KEY (id),
  UNIQUE KEY uq_applications_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Tenants; the application row is the first lock of every task transaction';

CREATE TABLE environments (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning application (applications.id)',
  name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Name, unique within the application',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_environments_name (application_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Environments of an application (test, production, ...)';

CREATE TABLE namespaces (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id; the isolation domain of tasks, queues, keys and tokens',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning application (applications.id)',
  environment_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning environment (environments.id)',
  name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Name, unique within the environment',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_namespaces_name (environment_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Isolation domains; nothing is visible across namespaces';

CREATE TABLE queues (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id: 32 lowercase hex characters',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning namespace (namespaces.id)',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning application, denormalised for the lock order',
  name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Name, unique within the namespace',
  state ENUM('ACTIVE','PAUSED') NOT NULL DEFAULT 'ACTIVE' COMMENT 'PAUSED queues are not claimed from; nothing held is released',
  max_concurrency INT UNSIGNED NULL COMMENT 'Queue permits: attempts in LEASED or RUNNING at once; NULL = unlimited',
  max_unfinished INT UNSIGNED NULL COMMENT 'Backlog quota of the queue; NULL = unlimited',
  max_attempts INT UNSIGNED NOT NULL DEFAULT 3 COMMENT 'Default attempts per task',
  lease_seconds INT UNSIGNED NOT NULL DEFAULT 30 COMMENT 'Lease granted by claim and renew, seconds',
  retry_backoff_seconds INT UNSIGNED NOT NULL DEFAULT 1 COMMENT 'Base of the exponential retry backoff, seconds',
  retry_backoff_max_seconds INT UNSIGNED NOT NULL DEFAULT 300 COMMENT 'Cap of the retry backoff, seconds',
  active_attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Queue permits held now',
  unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Tasks of this queue not yet final',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last settings or state change, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_queues_public_id (public_id),
  UNIQUE KEY uq_queues_name (namespace_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queues of a namespace with their permits and quotas';

CREATE TABLE credentials (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Lookup id embedded in the bearer token (not secret)',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Bound application',
  environment_id BIGINT UNSIGNED NOT NULL COMMENT 'Bound environment',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Bound namespace: every request is confined to it',
  secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'SHA-256 hex of the whole token; the token itself is never stored',
  scopes VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Comma-separated scopes (queues:manage, tasks:submit, ...)',
  all_queues TINYINT(1) NOT NULL DEFAULT 1 COMMENT '1 = every queue of the namespace; 0 = only credential_queues',
  label VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' COMMENT 'Free text for operators',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  revoked_at DATETIME(6) NULL COMMENT 'When revoked; revoked credentials are refused',
  PRIMARY KEY (id),
  UNIQUE KEY uq_credentials_public_id (public_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Bearer credentials; only a hash of the secret is kept';

CREATE TABLE credential_queues (
  credential_id BIGINT UNSIGNED NOT NULL COMMENT 'credentials.id',
  queue_id BIGINT UNSIGNED NOT NULL COMMENT 'queues.id the credential may use when all_queues = 0',
  PRIMARY KEY (credential_id, queue_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queue scope of credentials limited to a list of queues';
