-- depends: 000003_create_workers
-- Schedules, their immutable versions and the fires that produced tasks.

CREATE TABLE schedules (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'Internal id',
  public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Public id, 32 lowercase hex',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning namespace',
  application_id BIGINT UNSIGNED NOT NULL COMMENT 'Owning application',
  name VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Name, unique within the namespace',
  state ENUM('ACTIVE','PAUSED','DELETED') NOT NULL DEFAULT 'ACTIVE' COMMENT 'Only ACTIVE schedules fire; DELETED keeps history',
  current_version INT UNSIGNED NOT NULL COMMENT 'Latest schedule_versions.version',
  next_fire_at DATETIME(6) NULL COMMENT 'Next due fire time, UTC; set by the scheduler',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last change, UTC',
  PRIMARY KEY (id),
  UNIQUE KEY uq_schedules_public_id (public_id),
  UNIQUE KEY uq_schedules_name (namespace_id, name),
  KEY ix_schedules_due (state, next_fire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Recurring task producers';

CREATE TABLE schedule_versions (
  schedule_id BIGINT UNSIGNED NOT NULL COMMENT 'schedules.id',
  version INT UNSIGNED NOT NULL COMMENT '1-based version number',
  rule_kind ENUM('CRON','INTERVAL') NOT NULL COMMENT 'Rule type',
  cron VARCHAR(120) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'Cron expression for CRON rules',
  timezone VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'IANA time zone of the cron rule',
  interval_seconds INT UNSIGNED NULL COMMENT 'Period for INTERVAL rules',
  definition MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL COMMENT 'Definition JSON: {task: {...}} with fixed values, no templates',
  effective_from DATETIME(6) NOT NULL COMMENT 'Applies to fires at or after this time',
  created_at DATETIME(6) NOT NULL COMMENT 'Creation time, UTC',
  PRIMARY KEY (schedule_id, version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Immutable schedule versions';

CREATE TABLE schedule_fires (
  schedule_id BIGINT UNSIGNED NOT NULL COMMENT 'schedules.id',
  fire_time DATETIME(6) NOT NULL COMMENT 'Nominal fire time, UTC; the key makes each fire create one task',
  version INT UNSIGNED NOT NULL COMMENT 'Version used for the fire',
  task_id BIGINT UNSIGNED NULL COMMENT 'tasks.id created by the fire (NULL when refused by a quota)',
  created_at DATETIME(6) NOT NULL COMMENT 'When the fire was recorded',
  PRIMARY KEY (schedule_id, fire_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='One row per executed fire';

CREATE TABLE orbit_meta (
  meta_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Setting name',
  meta_value VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Setting value',
  updated_at DATETIME(6) NOT NULL COMMENT 'Last write, UTC',
  PRIMARY KEY (meta_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Installation facts such as the digest of the installed routines';
