-- worker_report_claim_as: POST /v1/workers/{session_id}/report-and-claim in one round trip:
-- credential_check (workers:consume, a credential covering its whole namespace), then
-- worker_report_claim. A credential limited to some queues gets QUEUE_SCOPED, and the shell
-- checks the session and each attempt against its queues before worker_report_claim (L4).
-- Params: the token's credential public id and SHA-256 (as credential_check), then
--   worker_report_claim's after its namespace.
-- Result sets, errors: credential_check's errors, then worker_report_claim's.
CREATE PROCEDURE worker_report_claim_as(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, IN p_items MEDIUMTEXT, IN p_max INT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_credential BIGINT UNSIGNED;
  DECLARE v_namespace BIGINT UNSIGNED;
  DECLARE v_all_queues TINYINT;
  CALL credential_check(p_credential_public_id, p_secret_sha256, 'workers:consume', 1,
                        v_credential, v_namespace, v_all_queues);
  CALL worker_report_claim(v_namespace, p_session_public_id, p_items, p_max);
END
