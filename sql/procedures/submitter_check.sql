-- submitter_check: who submits, for task_submit and task_submit_many, before their
-- transaction; they call it only when the caller is not the definer (as worker_account_check),
-- so the definer's own calls (the HTTP routes, the scheduler) keep the actor they pass. A
-- direct producer's account (orbit-admin producer-account) is refused any namespace it is not
-- bound to (worker_account_check, L4), and its tasks' actor is its account's name whatever it
-- passed.
-- Params: namespace; the actor, replaced for a direct account.
-- Errors: NOT_FOUND (worker_account_check's).
-- Locks: none.
CREATE PROCEDURE submitter_check(IN p_namespace_id BIGINT UNSIGNED, INOUT p_actor VARCHAR(200))
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  CALL worker_account_check(p_namespace_id);
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    SET p_actor = CONCAT('account:', SUBSTRING_INDEX(USER(), '@', 1));
  END IF;
END
