-- new_public_id(): a fresh 32-character lowercase hex id for public identifiers.
-- The one place for a dialect difference in id generation: UUID() exists in MySQL 8 and
-- MariaDB 10.6 alike (RANDOM_BYTES does not exist before MariaDB 10.10). UUID() is unsafe for
-- STATEMENT binlog; Orbit requires ROW binlog anyway (READ COMMITTED claim path).
-- Ids are unique, not secret: access is decided by namespace scope, never by guessing.
CREATE FUNCTION new_public_id() RETURNS CHAR(32) CHARACTER SET ascii
  NOT DETERMINISTIC NO SQL SQL SECURITY DEFINER
  RETURN LOWER(REPLACE(UUID(), '-', ''))
