-- tenant_bootstrap: create or reuse application, environment, namespace and queue by name, and
-- add one credential bound to them (orbit-admin bootstrap, SPEC 7).
-- Params: names; credential public id, SHA-256 of the token, comma-separated scopes.
-- Result set: {application_id, environment_id, namespace_id, queue_id (public hex)}.
-- Errors: INVALID_ARGUMENT for empty names.
-- Locks: applications row (by unique name), environments, namespaces, the namespace's gates
-- (new, or left as they are), queues rows, in that order; the credential row is new.
CREATE PROCEDURE tenant_bootstrap(
  IN p_application VARCHAR(100), IN p_environment VARCHAR(100), IN p_namespace VARCHAR(100),
  IN p_queue VARCHAR(100), IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_scopes VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin, IN p_label VARCHAR(200))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_env BIGINT UNSIGNED;
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE v_gates INT;
  DECLARE v_queue CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  IF COALESCE(p_application, '') = '' OR COALESCE(p_environment, '') = ''
     OR COALESCE(p_namespace, '') = '' OR COALESCE(p_queue, '') = '' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INVALID_ARGUMENT: names must not be empty';
  END IF;

  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- LAST_INSERT_ID(id) makes the existing row's id readable on the duplicate path.
  INSERT INTO applications (name, created_at) VALUES (p_application, v_now)
    ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);
  SET v_app = LAST_INSERT_ID();
  INSERT INTO environments (application_id, name, created_at) VALUES (v_app, p_environment, v_now)
    ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);
  SET v_env = LAST_INSERT_ID();
  INSERT INTO namespaces (application_id, environment_id, name, created_at)
    VALUES (v_app, v_env, p_namespace, v_now)
    ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);
  SET v_ns = LAST_INSERT_ID();
  -- A new namespace's gates (namespace_gate), with the application's quota flags as its row
  -- has them: the row is locked above, so a quota change waits and then sets these gates too.
  -- A plain count first: an existing namespace's gates are left alone (an insert that meets
  -- them would lock them shared, and wait for the writers holding them).
  SELECT COUNT(*) INTO v_gates FROM namespace_gates WHERE namespace_id = v_ns;
  INSERT INTO namespace_gates (namespace_id, slot, application_id, active_limited,
                                      unfinished_limited)
  SELECT v_ns, g.slot, v_app, a.max_active_attempts IS NOT NULL, a.max_unfinished IS NOT NULL
    FROM JSON_TABLE('[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31]',
                    '$[*]' COLUMNS (slot TINYINT UNSIGNED PATH '$')) g
    JOIN applications a ON a.id = v_app
   WHERE v_gates = 0;
  CALL key_floors_ensure(v_ns);
  INSERT INTO queues (public_id, namespace_id, application_id, name, created_at, updated_at)
    VALUES (new_public_id(), v_ns, v_app, p_queue, v_now, v_now)
    ON DUPLICATE KEY UPDATE id = id;
  SELECT public_id INTO v_queue FROM queues WHERE namespace_id = v_ns AND name = p_queue;
  INSERT INTO credentials (public_id, application_id, environment_id, namespace_id,
                           secret_sha256, scopes, all_queues, label, created_at)
    VALUES (p_credential_public_id, v_app, v_env, v_ns, p_secret_sha256, p_scopes, 1,
            COALESCE(p_label, ''), v_now);
  COMMIT;
  SELECT v_app AS application_id, v_env AS environment_id, v_ns AS namespace_id,
         v_queue AS queue_id;
END
