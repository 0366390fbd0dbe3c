-- credential_check: authenticate a bearer credential and check one scope, inside the call
-- that acts for it (the `*_as` routines): the shell would otherwise read the credential first,
-- a SELECT before every CALL. A plain read before the caller's transaction, a statement of its
-- own in autocommit mode, so it sees the latest commit: a revocation committed before the call
-- is seen, and the credential is refused from its next request. Takes no locks.
-- Params: the token's credential public id and SHA-256 (the shell parses the token and hashes
--   it; the secret never reaches the database), the scope needed.
-- Out: the credential's id, its namespace, whether it covers every queue of the namespace.
-- Errors: UNAUTHENTICATED (unknown credential, wrong secret, revoked), PERMISSION_DENIED (the
--   scope is missing).
-- The hash comparison is not constant-time: what it could leak is how much of SHA-256(token)
-- matches, which does not help to find a token.
CREATE PROCEDURE credential_check(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_scope VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
  OUT o_credential BIGINT UNSIGNED, OUT o_namespace BIGINT UNSIGNED, OUT o_all_queues TINYINT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_hash CHAR(64) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_scopes VARCHAR(255);
  DECLARE v_revoked DATETIME(6);
  DECLARE v_message VARCHAR(128);

  SET o_credential = NULL;
  SELECT id, namespace_id, secret_sha256, scopes, all_queues, revoked_at
    INTO o_credential, o_namespace, v_hash, v_scopes, o_all_queues, v_revoked
    FROM credentials WHERE public_id = p_credential_public_id;
  IF o_credential IS NULL OR v_hash <> p_secret_sha256 OR v_revoked IS NOT NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'UNAUTHENTICATED: missing or invalid credentials';
  END IF;
  IF FIND_IN_SET(p_scope, v_scopes) = 0 THEN
    SET v_message = CONCAT('PERMISSION_DENIED: credential lacks scope ', p_scope);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_message;
  END IF;
END
