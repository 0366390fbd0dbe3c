-- attempt_result_many_as: POST /v1/attempts/result in one round trip: worker_credential, then
-- attempt_result_many (sql/README.md, "One round trip a request").
-- Params: the token's credential public id and SHA-256, then attempt_result_many's after its
--   namespace. Result set and errors: worker_credential's, then attempt_result_many's.
CREATE PROCEDURE attempt_result_many_as(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_items MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_namespace BIGINT UNSIGNED;
  CALL worker_credential(p_credential_public_id, p_secret_sha256, v_namespace);
  CALL attempt_result_many(v_namespace, p_session_public_id, p_items);
END
