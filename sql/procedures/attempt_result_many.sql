-- attempt_result_many: attempt_result for up to 100 attempts of one session in ONE transaction
-- (POST /v1/attempts/result). Each item keeps its own outcome: an item that fails (NOT_FOUND,
-- LEASE_LOST, STATE_CONFLICT) is rolled back to its savepoint and answered with its error; the
-- others commit. An item repeated with the same result is a duplicate, as in attempt_result.
-- Params: namespace, session public id, items as a JSON array of objects {attempt_id, outcome,
--   retryable (0/1), result, error}, where result and error are the canonical JSON text (a JSON
--   string), or '' (or null) for none: exactly what attempt_result receives (validated by the
--   shell). JSON text is never empty, so '' is unambiguous and keeps JSON nulls out of
--   JSON_TABLE, where MySQL 8 and MariaDB may read them differently.
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL),
--   attempt_id, task_id, duplicate.
--
-- The body, its two paths (a group set-based, the rest item by item) and its locks (a gate
-- of the namespace first) are attempt_result_apply's (shared with worker_report_claim); this
-- procedure resolves the session, and is the transaction and its answer. Deadlocks and lock-wait timeouts are not item
-- errors: they roll back the whole batch (outer handler) and the shell retries it.
CREATE PROCEDURE attempt_result_many(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                     IN p_items MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_limits TINYINT UNSIGNED;
  DECLARE v_out MEDIUMTEXT;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;

  -- The session, resolved once for the batch (NULL: every item is LEASE_LOST).
  SELECT id INTO v_session FROM worker_sessions
   WHERE public_id = p_session_public_id AND namespace_id = p_namespace_id;
  CALL attempt_result_tables();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  CALL attempt_result_apply(p_namespace_id, p_session_public_id, p_items, v_session, v_app, v_limits, v_out);
  COMMIT;
  CALL attempt_result_answers(v_out);
END
