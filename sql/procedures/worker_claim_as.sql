-- worker_claim_as: a claim of POST /v1/workers/{session_id}/claim in one round trip:
-- worker_credential, then worker_claim (sql/README.md, "One round trip a request").
-- Params: the token's credential public id and SHA-256, then worker_claim's after its
--   namespace. Result set and errors: worker_credential's, then worker_claim's.
CREATE PROCEDURE worker_claim_as(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_max INT UNSIGNED, IN p_start TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_namespace BIGINT UNSIGNED;
  CALL worker_credential(p_credential_public_id, p_secret_sha256, v_namespace);
  CALL worker_claim(v_namespace, p_session_public_id, p_max, p_start);
END
