-- queues_lock: lock, in id order, the rows of the given queues that have one of the named
-- limits. Helper inside the caller's transaction, for every transaction that may take more
-- than one queue row (sql/README.md, "Lock order", step 4): a claim (its session's queues),
-- a batch of results (its attempts' queues) and a batch of submissions (its items' queues).
-- A queue without such a limit is never locked: its counters are not kept, so no writer
-- needs its row.
-- Params: namespace; the queues as a JSON array of objects naming a queue id in `queue` (a
--   batch of submissions passes its items as they are; any order, repeats allowed, ids
--   outside the namespace left out); the limits as queue_limits numbers them (4:
--   max_concurrency, 8: max_unfinished; a queue is locked when it has one of them).
-- Out: the ids locked, each after a comma (',3,7'; '' when none), for FIND_IN_SET.
-- One plain read per queue finds the next limited id above the last, then its row is locked by
-- key: a locking range read would also lock the first index row past the range, another
-- queue's (sql/README.md, "Locking reads").
CREATE PROCEDURE queues_lock(IN p_namespace_id BIGINT UNSIGNED, IN p_queues MEDIUMTEXT,
                             IN p_limits TINYINT UNSIGNED, OUT p_locked TEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_queue BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  SET p_locked = '';
  limited_queues: LOOP
    SET v_next = NULL;
    SELECT MIN(q.id) INTO v_next
      FROM JSON_TABLE(p_queues, '$[*]' COLUMNS (id BIGINT UNSIGNED PATH '$.queue')) j
      STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = j.id
     WHERE q.id > v_queue AND q.namespace_id = p_namespace_id
       AND ((p_limits & 4 AND q.max_concurrency IS NOT NULL)
            OR (p_limits & 8 AND q.max_unfinished IS NOT NULL));
    IF v_next IS NULL THEN LEAVE limited_queues; END IF;
    SELECT id INTO v_queue FROM queues WHERE id = v_next FOR UPDATE;
    SET p_locked = CONCAT(p_locked, ',', v_queue);
  END LOOP;
END
