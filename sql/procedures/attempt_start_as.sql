-- attempt_start_as: POST /v1/attempts/{attempt_id}/start in one round trip: worker_credential,
-- then attempt_start (sql/README.md, "One round trip a request").
-- Params: the token's credential public id and SHA-256, then attempt_start's after its
--   namespace. Result set and errors: worker_credential's, then attempt_start's.
CREATE PROCEDURE attempt_start_as(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_namespace BIGINT UNSIGNED;
  CALL worker_credential(p_credential_public_id, p_secret_sha256, v_namespace);
  CALL attempt_start(v_namespace, p_session_public_id, p_attempt_public_id);
END
