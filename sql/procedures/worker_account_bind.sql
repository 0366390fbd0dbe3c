-- worker_account_bind: bind a direct worker account to a namespace (orbit-admin
-- worker-account, L4). The account then acts for its bound namespaces and no other
-- (worker_account_check). Binding again is harmless.
-- Params: the account's user name; application, environment and namespace names.
-- Result set: {namespace_id, namespaces (how many the account is bound to now)}.
-- Errors: NOT_FOUND (no such namespace).
-- Locks: the binding row (primary key), nothing shared.
CREATE PROCEDURE worker_account_bind(IN p_user VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                     IN p_application VARCHAR(100),
                                     IN p_environment VARCHAR(100), IN p_namespace VARCHAR(100))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_env BIGINT UNSIGNED;
  DECLARE v_ns BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;

  CALL namespace_resolve(p_application, p_environment, p_namespace, v_app, v_env, v_ns);
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  INSERT IGNORE INTO worker_accounts (account_user, namespace_id, created_at)
    VALUES (p_user, v_ns, UTC_TIMESTAMP(6));
  COMMIT;
  SELECT v_ns AS namespace_id,
         (SELECT COUNT(*) FROM worker_accounts WHERE account_user = p_user) AS namespaces;
END
