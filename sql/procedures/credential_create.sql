-- credential_create: a bearer credential for an existing namespace, with the scopes and queue
-- scope the operator chose (orbit-admin credential, SPEC 1). Bootstrap's credential holds the
-- tenant scopes over every queue; this one may hold less.
-- Params: application, environment and namespace names; credential public id and SHA-256 of
--   the token (made by the shell); comma-separated scopes (checked by the shell); the queue
--   scope as a JSON array of queue public ids (NULL = every queue of the namespace); a label.
-- Result set: {credential_id (public), namespace_id, all_queues, queues (count)}.
-- Errors: NOT_FOUND (no such namespace; a queue id that is not one of the namespace's queues),
--   INVALID_ARGUMENT (an empty queue list).
-- Locks: none on existing rows: a credential and its queue rows are new, and queues are never
-- deleted, so the queue check cannot go stale before the commit.
CREATE PROCEDURE credential_create(
  IN p_application VARCHAR(100), IN p_environment VARCHAR(100), IN p_namespace VARCHAR(100),
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_scopes VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin, IN p_queue_ids TEXT,
  IN p_label VARCHAR(200))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_env BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_ns BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_named INT DEFAULT 0;
  DECLARE v_found INT DEFAULT 0;
  DECLARE v_credential BIGINT UNSIGNED;
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  CALL namespace_resolve(p_application, p_environment, p_namespace, v_app, v_env, v_ns);
  IF p_queue_ids IS NOT NULL THEN
    SELECT COUNT(DISTINCT j.id), COUNT(DISTINCT q.id) INTO v_named, v_found
      FROM JSON_TABLE(p_queue_ids, '$[*]' COLUMNS (
             id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) j
      LEFT JOIN queues q ON q.public_id = j.id AND q.namespace_id = v_ns;
    IF v_named = 0 THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INVALID_ARGUMENT: the queue list is empty';
    END IF;
    IF v_found < v_named THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found in this namespace';
    END IF;
  END IF;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  INSERT INTO credentials (public_id, application_id, environment_id, namespace_id,
                           secret_sha256, scopes, all_queues, label, created_at)
    VALUES (p_credential_public_id, v_app, v_env, v_ns, p_secret_sha256, p_scopes,
            p_queue_ids IS NULL, COALESCE(p_label, ''), v_now);
  SET v_credential = LAST_INSERT_ID();
  IF p_queue_ids IS NOT NULL THEN
    INSERT INTO credential_queues (credential_id, queue_id)
    SELECT DISTINCT v_credential, q.id
      FROM JSON_TABLE(p_queue_ids, '$[*]' COLUMNS (
             id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) j
      JOIN queues q ON q.public_id = j.id AND q.namespace_id = v_ns;
  END IF;
  COMMIT;
  SELECT p_credential_public_id AS credential_id, v_ns AS namespace_id,
         p_queue_ids IS NULL AS all_queues,
         (SELECT COUNT(*) FROM credential_queues WHERE credential_id = v_credential) AS queues;
END
