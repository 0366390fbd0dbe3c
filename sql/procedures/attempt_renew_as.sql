-- attempt_renew_as: POST /v1/attempts/{attempt_id}/renew in one round trip (the SDK worker
-- renews every attempt it holds each third of a lease): credential_check (workers:consume, a
-- credential covering its whole namespace), then attempt_renew. A credential limited to some
-- queues gets QUEUE_SCOPED, and the shell checks the attempt against its queues before
-- attempt_renew (SPEC L4).
-- Params: the token's credential public id and SHA-256 (as credential_check), then
--   attempt_renew's after its namespace.
-- Result set, errors: credential_check's errors, then attempt_renew's.
CREATE PROCEDURE attempt_renew_as(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_attempt_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_credential BIGINT UNSIGNED;
  DECLARE v_namespace BIGINT UNSIGNED;
  DECLARE v_all_queues TINYINT;
  CALL credential_check(p_credential_public_id, p_secret_sha256, 'workers:consume', 1,
                        v_credential, v_namespace, v_all_queues);
  CALL attempt_renew(v_namespace, p_session_public_id, p_attempt_public_id);
END
