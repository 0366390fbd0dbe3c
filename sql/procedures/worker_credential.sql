-- worker_credential: authenticate a bearer credential for a worker's `*_as` routines and check
-- its workers:consume scope, inside the call that acts for it: the shell would otherwise read
-- the credential first, a SELECT before every CALL. A plain read before the caller's
-- transaction, a statement of its own in autocommit mode, so it sees the latest commit: a
-- revocation committed before the call is seen, and the credential is refused from its next
-- request. Takes no locks. POST /v1/tasks reads its credential with its queue
-- (task_submit_as), one read where two were.
-- Params: the token's credential public id and SHA-256 (the shell parses the token and hashes
--   it; the secret never reaches the database).
-- Out: the credential's namespace.
-- Errors: UNAUTHENTICATED (unknown credential, wrong secret, revoked), PERMISSION_DENIED (the
--   scope is missing), and QUEUE_SCOPED for a credential limited to some queues: a code no
--   client sees; the shell then reads the credential itself, checks the session and each
--   attempt against its queues (SPEC L4) and calls the routine without `_as`.
-- The hash comparison is not constant-time: what it could leak is how much of SHA-256(token)
-- matches, which does not help to find a token.
CREATE PROCEDURE worker_credential(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  OUT o_namespace BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_credential BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_hash CHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_scopes VARCHAR(255);
  DECLARE v_all_queues TINYINT;
  DECLARE v_revoked DATETIME(6);

  SELECT id, namespace_id, secret_sha256, scopes, all_queues, revoked_at
    INTO v_credential, o_namespace, v_hash, v_scopes, v_all_queues, v_revoked
    FROM credentials WHERE public_id = p_credential_public_id;
  IF v_credential IS NULL OR v_hash <> p_secret_sha256 OR v_revoked IS NOT NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'UNAUTHENTICATED: missing or invalid credentials';
  END IF;
  IF FIND_IN_SET('workers:consume', v_scopes) = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'PERMISSION_DENIED: credential lacks scope workers:consume';
  END IF;
  IF v_all_queues = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUEUE_SCOPED: the credential is limited to some queues';
  END IF;
END
