-- queue_create: create a queue in a namespace with the W8 settings (validated by the shell).
-- Result set: {queue_id (public)}.
-- Errors: STATE_CONFLICT when the name is taken in the namespace.
-- Locks: applications row, then the new queues row.
CREATE PROCEDURE queue_create(
  IN p_namespace_id BIGINT UNSIGNED, IN p_application_id BIGINT UNSIGNED, IN p_name VARCHAR(100),
  IN p_max_concurrency INT UNSIGNED, IN p_max_unfinished INT UNSIGNED, IN p_max_attempts INT UNSIGNED,
  IN p_lease_seconds INT UNSIGNED, IN p_backoff INT UNSIGNED, IN p_backoff_max INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_public CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_now DATETIME(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_app FROM applications WHERE id = p_application_id FOR UPDATE;
  -- The clock is read after the first lock: a call that waited must not stamp times
  -- earlier than the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  IF EXISTS (SELECT 1 FROM queues WHERE namespace_id = p_namespace_id AND name = p_name) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: a queue with this name exists in the namespace';
  END IF;
  SET v_public = new_public_id();
  INSERT INTO queues (public_id, namespace_id, application_id, name, max_concurrency,
                      max_unfinished, max_attempts, lease_seconds, retry_backoff_seconds,
                      retry_backoff_max_seconds, created_at, updated_at)
    VALUES (v_public, p_namespace_id, p_application_id, p_name, p_max_concurrency,
            p_max_unfinished, p_max_attempts, p_lease_seconds, p_backoff, p_backoff_max,
            v_now, v_now);
  COMMIT;
  SELECT v_public AS queue_id;
END
