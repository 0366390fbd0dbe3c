-- depends: 000002_create_tasks
-- Polling worker sessions and the queues they consume.

CREATE TABLE worker_sessions (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public session id, 32 lowercase hex',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Namespace the worker serves',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Application, denormalised for the lock order',
  worker_id VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Stable worker identity chosen by the process',
  capacity INT UNSIGNED NOT NULL COMMENT 'Attempts the worker runs at once',
  in_flight INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Attempts of this session in LEASED or RUNNING',
  state ENUM('OPEN','CLOSED') NOT NULL DEFAULT 'OPEN' COMMENT 'CLOSED after goodbye; hello reopens',
  registration_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Fingerprint of queues and capacity at hello',
  created_at DATETIME(6) NOT NULL COMMENT 'First hello, UTC',
  last_seen_at DATETIME(6) NOT NULL COMMENT 'Last hello, claim, start, renew or result',
  closed_at DATETIME(6) NULL COMMENT 'Goodbye time',
  PRIMARY KEY (id),
  UNIQUE KEY uq_worker_sessions_public_id (public_id),
  UNIQUE KEY uq_worker_sessions_identity (namespace_id, worker_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per worker identity';

CREATE TABLE worker_session_queues (
  session_id BIGINT UNSIGNED NOT NULL COMMENT 'worker_sessions.id',
  queue_id BIGINT UNSIGNED NOT NULL COMMENT 'queues.id consumed by the session',
  PRIMARY KEY (session_id, queue_id),
  KEY ix_worker_session_queues_queue (queue_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Queues a session claims from';
