-- producer_queue: a queue's internal id from its public id, for a direct producer (the SDK's
-- DirectProducer), whose account (orbit-admin producer-account) may only EXECUTE the
-- submission routines and cannot read tables. Queues never move or change ids, so the
-- producer asks once per queue.
-- Params: namespace (worker_namespace's), the queue's public id.
-- Result set: {queue_id}.
-- Errors: NOT_FOUND (no such queue in the namespace, or a namespace the account is not bound
--   to: the same answer, L4).
-- Locks: none (read-only).
CREATE PROCEDURE producer_queue(IN p_namespace_id BIGINT UNSIGNED,
                                IN p_queue_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED;
  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL worker_account_check(p_namespace_id);  -- L4: a direct account's namespaces
  END IF;
  SELECT id INTO v_queue FROM queues
   WHERE public_id = p_queue_public_id AND namespace_id = p_namespace_id;
  IF v_queue IS NULL THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'NOT_FOUND: queue not found';
  END IF;
  SELECT v_queue AS queue_id;
END
