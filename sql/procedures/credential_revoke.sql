-- credential_revoke: refuse a credential from now on (orbit-admin revoke, SPEC 1). Every
-- request authenticates against the row, so the next request with the token is 401.
-- Revoking again keeps the first revocation time.
-- Params: the credential's public id (the 16 hex after "orb_" in its token).
-- Result set: {credential_id, revoked_at}.
-- Errors: NOT_FOUND.
-- Locks: the credentials row.
CREATE PROCEDURE credential_revoke(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_credential BIGINT UNSIGNED DEFAULT NULL;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT id INTO v_credential FROM credentials WHERE public_id = p_credential_public_id FOR UPDATE;
  IF v_credential IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: credential not found';
  END IF;
  UPDATE credentials SET revoked_at = COALESCE(revoked_at, UTC_TIMESTAMP(6))
   WHERE id = v_credential;
  COMMIT;
  SELECT public_id AS credential_id, revoked_at FROM credentials WHERE id = v_credential;
END
