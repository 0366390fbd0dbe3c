-- worker_credential: credential_check for a worker's `*_as` routines (workers:consume), which
-- act only for a credential that covers every queue of its namespace. A plain read before the
-- caller's transaction, as credential_check.
-- Params: the token's credential public id and SHA-256 (as credential_check).
-- Out: the credential's namespace.
-- Errors: credential_check's, and QUEUE_SCOPED for a credential limited to some queues: a code
--   no client sees; the shell then reads the credential itself, checks the session and each
--   attempt against its queues (SPEC L4) and calls the routine without `_as`.
CREATE PROCEDURE worker_credential(
  IN p_credential_public_id CHAR(16) CHARACTER SET ascii COLLATE ascii_bin, IN p_secret_sha256 CHAR(64) CHARACTER SET ascii COLLATE ascii_bin,
  OUT o_namespace BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_credential BIGINT UNSIGNED;
  DECLARE v_all_queues TINYINT;
  CALL credential_check(p_credential_public_id, p_secret_sha256, 'workers:consume',
                        v_credential, o_namespace, v_all_queues);
  IF v_all_queues = 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'QUEUE_SCOPED: the credential is limited to some queues';
  END IF;
END
