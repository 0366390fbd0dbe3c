-- worker_account_check: refuse a direct worker account acting outside its namespaces (L4).
-- Called first by every routine a direct worker account may EXECUTE (the worker routines),
-- before their transaction. Those routines run SQL SECURITY DEFINER, so inside them
-- CURRENT_USER() is the definer and USER() the account that called. They call it only when
-- the two differ: the definer's own calls (the HTTP routes, the scheduler) are most calls, and
-- a CALL frame costs about what a statement does (sql/README.md, "What a call costs").
--   * the definer's own user (orbit and orbit-migrate) passes without a read;
--   * an account listed in worker_accounts passes only for a namespace it is bound to;
--   * any other account passes: it was given EXECUTE by hand, not by orbit-admin, and the
--     operator who did that decided what it may do.
-- Errors: NOT_FOUND (the same answer as for a namespace that does not exist: no leak).
-- Locks: none (reads worker_accounts by its primary key).
CREATE PROCEDURE worker_account_check(IN p_namespace_id BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_caller VARCHAR(80) CHARACTER SET utf8mb4 DEFAULT SUBSTRING_INDEX(USER(), '@', 1);
  IF v_caller <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1)
     AND EXISTS (SELECT 1 FROM worker_accounts WHERE account_user = v_caller)
     AND NOT EXISTS (SELECT 1 FROM worker_accounts
                      WHERE account_user = v_caller AND namespace_id = p_namespace_id) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: namespace not found';
  END IF;
END
