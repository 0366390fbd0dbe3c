-- attempt_result_apply: the body of attempt_result_many and of worker_report_claim's results.
-- Helper inside the caller's transaction: no transaction control, no handler. The caller made
-- the group table (attempt_result_tables) and answers with attempt_result_answers(p_out) after
-- its commit.
-- Params: as attempt_result_many, and the session's internal id, resolved by the caller before
--   its transaction (NULL when the session is unknown: every item is LEASE_LOST). Out: the
--   application (from the gate), its quotas (namespace_gate's bits), and the per-item outcomes
--   of the items that went one by one, as JSON (the group's are in result_group_mem).
--
-- Two paths with one outcome. The common item, a 'succeeded' or 'failed' result for a RUNNING
-- attempt of this session whose lease has not expired, named once in the batch (a retryable
-- failure only where the queue's backoff is not zero, so the retry always waits), is applied
-- set-based: a statement per step for the whole group instead of ~20 per item (the statement,
-- not the row, is what a procedure pays for). Its effects are attempt_result_one's for those
-- cases: the attempt SUCCEEDED, FAILED or RETRY with the outcome, permits deleted, the key
-- freed and its next parked task promoted, counters given back; the task SUCCEEDED, FAILED, or
-- WAITING in the DELAYED lane until its backoff (exponential with jitter) runs out; one
-- history row. Every other item goes through attempt_result_one in order behind its
-- savepoint. The groups are independent: a fast item's attempt appears in no other item, and
-- results never depend on counters.
--
-- Locks, in order: a gate of the namespace and, where the application has quotas, its row
-- (namespace_gate), the items' attempts rows (item order), the queues rows of those that have
-- a limit (queues_lock: id order), the worker_sessions row, the group's tasks and permits
-- rows, every key row the items hold (keys_lock, key order), the group's key_slots rows, its
-- promoted tasks, and per remaining item those of attempt_result_one (rows it holds already,
-- and its own task and queue). The group's tasks are RUNNING and its permits its own: no
-- holder of a key row waits for either.
-- Deadlocks and lock-wait timeouts are not item errors: they roll back the whole batch (outer
-- handler) and the shell retries it.
CREATE PROCEDURE attempt_result_apply(IN p_namespace_id BIGINT UNSIGNED, IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                      IN p_items MEDIUMTEXT, IN p_session BIGINT UNSIGNED,
                                      OUT p_app BIGINT UNSIGNED, OUT p_limits TINYINT UNSIGNED,
                                      OUT p_out MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_item MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_duplicate TINYINT;
  DECLARE v_error VARCHAR(512);
  DECLARE v_fast INT DEFAULT 0;
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_texts INT DEFAULT 0;
  DECLARE v_retries INT DEFAULT 0;
  DECLARE v_keyed INT DEFAULT 0;
  DECLARE v_queue_low BIGINT UNSIGNED;
  DECLARE v_queue_high BIGINT UNSIGNED;
  DECLARE v_fast_seqs TEXT DEFAULT '';
  DECLARE v_ignored BIGINT;
  DECLARE v_now DATETIME(6);
  DECLARE v_session BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE v_limits TINYINT UNSIGNED DEFAULT 0;
  DECLARE v_queue_limits TINYINT UNSIGNED DEFAULT 0;
  DECLARE v_queue_ids MEDIUMTEXT;
  DECLARE v_locked_ids TEXT;
  DECLARE v_keys MEDIUMTEXT;
  DECLARE v_slotted INT DEFAULT 0;
  DECLARE v_text_seqs TEXT DEFAULT '';
  DECLARE v_grouped TINYINT DEFAULT 0;
  DECLARE v_texted TINYINT DEFAULT 0;
  DECLARE v_items_read TINYINT DEFAULT 0;
  DECLARE v_attempt BIGINT UNSIGNED;
  DECLARE v_state VARCHAR(10);
  DECLARE v_result MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_text MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;

  SET v_session = p_session;
  IF v_session IS NOT NULL THEN
    CALL namespace_gate(p_namespace_id, 3, v_app, v_limits);
    SELECT COUNT(*) INTO v_ignored
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             attempt_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$.attempt_id')) j
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.attempt_id AND a.namespace_id = p_namespace_id
       FOR UPDATE;
    -- Whether any of the items' queues has a limit (those are then locked in id order,
    -- queues_lock; a queue without one is never locked), and the keys the items hold: NULL
    -- when none does (an unkeyed item's JSON null would read as the key "null" in keys_lock).
    SELECT BIT_OR(4 * (q.max_concurrency IS NOT NULL) + 8 * (q.max_unfinished IS NOT NULL)),
           IF(COUNT(r.id) > 0, JSON_ARRAYAGG(r.concurrency_key), NULL)
      INTO v_queue_limits, v_keys
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             attempt_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$.attempt_id')) j
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.attempt_id AND a.namespace_id = p_namespace_id
      STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = a.queue_id
      LEFT JOIN permits p FORCE INDEX (PRIMARY) ON p.attempt_id = a.id AND p.kind = 'KEY'
      LEFT JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = p.scope_id;
    IF v_queue_limits THEN
      SELECT JSON_ARRAYAGG(JSON_OBJECT('queue', a.queue_id)) INTO v_queue_ids
        FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
               attempt_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$.attempt_id')) j
        STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.attempt_id AND a.namespace_id = p_namespace_id;
      CALL queues_lock(p_namespace_id, v_queue_ids, 12, v_locked_ids);
    END IF;
    -- The session; the keys come after the group's rows (below).
    SELECT id INTO v_ignored FROM worker_sessions WHERE id = v_session FOR UPDATE;
    -- The clock is read after the locks: a call that waited must not stamp times earlier than
    -- the change it waited for (the keys' stamps after theirs, below).
    SET v_now = UTC_TIMESTAMP(6);
    -- state: the attempt's new state; a retry whose attempts or deadline run out is FAILED
    -- below, once its backoff is drawn. started: the task's started attempts, this one too.
    INSERT INTO result_group_mem (seq, attempt_id, task_id, queue_id, resource_id, token, fp, state,
                                  retryable, started, texts, limits, delay, slot)
    SELECT j.seq - 1, a.id, a.task_id, a.queue_id, COALESCE(r.id, 0), a.concurrency_token,
           SHA2(CONCAT(j.outcome, '|', j.retryable, '|', COALESCE(NULLIF(j.result, ''), 'null'),
                       '|', COALESCE(NULLIF(j.error, ''), 'null')), 256),
           IF(j.outcome = 'succeeded', 'SUCCEEDED', IF(j.retryable = 1, 'RETRY', 'FAILED')),
           j.retryable,
           IF(j.outcome = 'failed' AND j.retryable = 1,
              (SELECT COUNT(*) FROM attempts s FORCE INDEX (uq_attempts_number)
                WHERE s.task_id = a.task_id AND s.started_at IS NOT NULL), 0),
           COALESCE(j.result, '') <> '' OR COALESCE(j.error, '') <> '',
           4 * (q.max_concurrency IS NOT NULL) + 8 * (q.max_unfinished IS NOT NULL),
           -- attempt_result_one's backoff for a retry, exponential with jitter in [0.5, 1.0] of
           -- the capped delay, drawn here: the queue is read by this statement without a lock
           -- (an UPDATE joined to it would lock the row every result of the queue reads).
           IF(j.outcome = 'failed' AND j.retryable = 1,
              LEAST(q.retry_backoff_max_seconds,
                    q.retry_backoff_seconds * POW(2, LEAST(
                      (SELECT COUNT(*) FROM attempts s FORCE INDEX (uq_attempts_number)
                        WHERE s.task_id = a.task_id AND s.started_at IS NOT NULL), 30) - 1))
              * (0.5 + RAND() / 2), 0),
           a.concurrency_slot
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             seq FOR ORDINALITY,
             attempt_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$.attempt_id',
             outcome VARCHAR(16) PATH '$.outcome',
             retryable TINYINT PATH '$.retryable',
             result MEDIUMTEXT PATH '$.result',
             error MEDIUMTEXT PATH '$.error')) j
      STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id) ON a.public_id = j.attempt_id AND a.namespace_id = p_namespace_id
      STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = a.queue_id
      LEFT JOIN permits p FORCE INDEX (PRIMARY) ON p.attempt_id = a.id AND p.kind = 'KEY'
      -- The key row where the attempt holds its slot (P2): slot 0 on the row, any other in
      -- key_slots.
      LEFT JOIN concurrency_resources r FORCE INDEX (PRIMARY)
        ON r.id = p.scope_id
       AND IF(a.concurrency_slot = 0, r.holder_attempt_id = a.id,
              EXISTS (SELECT 1 FROM key_slots s FORCE INDEX (PRIMARY)
                       WHERE s.resource_id = p.scope_id AND s.slot = a.concurrency_slot
                         AND s.attempt_id = a.id))
     WHERE (j.outcome = 'succeeded'
            OR (j.outcome = 'failed' AND (j.retryable = 0 OR q.retry_backoff_seconds > 0)))
       AND j.retryable IN (0, 1)
       AND a.session_id = v_session AND a.state = 'RUNNING' AND a.lease_expires_at > v_now
       -- A key permit goes with the group where the attempt still holds its slot, and the key
       -- has no rate (P6: its next task may have to wait for it, key_promote_next's choice).
       AND (p.attempt_id IS NULL OR (r.id IS NOT NULL AND r.rate_permits IS NULL));
    SET v_fast = ROW_COUNT();
    -- An attempt named more than once in the batch goes item by item, each of its items: out
    -- of the group again. Asked only of a group of several: joined to every report, the
    -- derived table that finds them was 6% of a report of one. A derived table, read once (a
    -- correlated subquery over JSON_TABLE parsed the whole batch again for every item).
    IF v_fast > 1 THEN
      DELETE f FROM (SELECT attempt_id FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
               attempt_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$.attempt_id')) o
              GROUP BY attempt_id HAVING COUNT(*) > 1) twice
        STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_public_id)
          ON a.public_id = twice.attempt_id AND a.namespace_id = p_namespace_id
        STRAIGHT_JOIN result_group_mem f ON f.attempt_id = a.id;
      SET v_fast = v_fast - ROW_COUNT();
    END IF;
  END IF;

  IF v_fast > 0 THEN
    -- What the group holds decides which steps below it needs: a batch of successes without
    -- keys skips the retry statement and the keys' three, one without limits the counters.
    SELECT GROUP_CONCAT(seq), COALESCE(GROUP_CONCAT(IF(texts = 1, seq, NULL)), ''),
           SUM(state = 'RETRY'), SUM(texts), SUM(resource_id > 0), MIN(queue_id), MAX(queue_id),
           BIT_OR(limits), SUM(resource_id > 0 AND slot > 0)
      INTO v_fast_seqs, v_text_seqs, v_retries, v_texts, v_keyed, v_queue_low, v_queue_high,
           v_queue_limits, v_slotted
      FROM result_group_mem;
    SET v_done = v_fast - v_retries;
    IF v_retries > 0 THEN
      -- Retries (their backoff drawn above): one whose attempts or deadline run out fails.
      UPDATE result_group_mem f STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
         SET f.state = 'FAILED'
       WHERE f.state = 'RETRY'
         AND NOT (f.started < t.max_attempts
                  AND (t.deadline_at IS NULL
                       OR v_now + INTERVAL ROUND(f.delay * 1000000) MICROSECOND < t.deadline_at));
      SET v_done = v_done + ROW_COUNT();
    END IF;
    -- Joins run from the group's rows to the tables (STRAIGHT_JOIN): the optimizer has no
    -- statistics for a temporary table and must not start from a large table. The texts are
    -- not part of this statement (they are written by key in the item loop below): a
    -- multi-table UPDATE keeps the new values of the tables after the first in an internal
    -- temporary table, MariaDB's in-memory one holds no TEXT, and the on-disk ones it then
    -- makes cost a fifth of the call's time and, on MariaDB 10.11, crashed a freshly
    -- promoted server in their error path (sql/README.md).
    UPDATE result_group_mem f
      STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = f.attempt_id
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
       SET a.outcome = IF(f.state = 'SUCCEEDED', 'succeeded', 'failed'), a.retryable = f.retryable,
           a.result_sha256 = f.fp, a.state = f.state, a.finished_at = v_now,
           t.state = IF(f.state = 'RETRY', 'WAITING', f.state),
           t.lane = IF(f.state = 'RETRY', 'DELAYED', NULL),
           t.available_at = IF(f.state = 'RETRY',
                               v_now + INTERVAL ROUND(f.delay * 1000000) MICROSECOND, t.available_at),
           t.updated_at = v_now, t.finished_at = IF(f.state = 'RETRY', t.finished_at, v_now);
    -- The counters kept: a queue's where it has a limit, the application's where it has a
    -- quota (their rows are locked above).
    IF v_queue_limits > 0 THEN
      IF v_queue_low = v_queue_high THEN
        -- One queue (a worker's usual report): by key, without grouping the rows.
        UPDATE queues SET active_attempts = active_attempts - IF(max_concurrency IS NULL, 0, v_fast),
                          unfinished_tasks = unfinished_tasks - IF(max_unfinished IS NULL, 0, v_done)
         WHERE id = v_queue_low;
      ELSE
        UPDATE queues q
          JOIN (SELECT queue_id, COUNT(*) AS n, SUM(state <> 'RETRY') AS done FROM result_group_mem
                 WHERE limits > 0 GROUP BY queue_id) c ON c.queue_id = q.id
           SET q.active_attempts = q.active_attempts - IF(q.max_concurrency IS NULL, 0, c.n),
               q.unfinished_tasks = q.unfinished_tasks - IF(q.max_unfinished IS NULL, 0, c.done);
      END IF;
    END IF;
    UPDATE worker_sessions SET in_flight = in_flight - v_fast WHERE id = v_session;
    IF v_limits > 0 THEN
      UPDATE applications
         SET active_attempts = active_attempts - IF(v_limits & 1, v_fast, 0),
             unfinished_tasks = unfinished_tasks - IF(v_limits & 2, v_done, 0)
       WHERE id = v_app;
    END IF;
    DELETE p FROM result_group_mem f STRAIGHT_JOIN permits p FORCE INDEX (PRIMARY) ON p.attempt_id = f.attempt_id;
    INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                              from_state, to_state, actor, details, created_at)
    SELECT task_id, p_namespace_id, attempt_id, NULLIF(token, 0),
           IF(state = 'RETRY', 'RETRY_SCHEDULED', state), 'RUNNING',
           IF(state = 'RETRY', 'WAITING', state), CONCAT('session:', p_session_public_id),
           CASE WHEN state = 'RETRY' THEN CONCAT('retry after ', ROUND(delay, 3), 's')
                WHEN state = 'FAILED' AND retryable = 1 THEN 'attempts or deadline exhausted' END,
           v_now
      FROM result_group_mem ORDER BY seq;
  END IF;
  -- Every key the items hold, in key order, all at once, before any of them is freed (the
  -- group's below, the other items' in the loop): taken after the group's own rows are
  -- written, so a report holds its keys only for what it does to them, the claim that follows
  -- and the commit. A key of limit N has holders in several sessions, whose reports all need
  -- its row; taken at the start, the rows were held through the whole report and the workers'
  -- reports waited for each other (bench/README.md, "Key limits and rates"). The group read
  -- above needs no key row: a slot's holder changes only under its attempt's row, which this
  -- call holds, and a rate a policy gives a key meanwhile is met by the grant (attempt_grant).
  IF v_keys IS NOT NULL THEN
    CALL keys_lock(p_namespace_id, v_keys, 0);
    -- The keys' stamps are read after their locks: not earlier than a change waited for.
    SET v_now = UTC_TIMESTAMP(6);
  END IF;
  IF v_fast > 0 THEN
    IF v_keyed > v_slotted THEN
      UPDATE result_group_mem f STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = f.resource_id
         SET r.holder_attempt_id = NULL, r.version = r.version + 1, r.updated_at = v_now
       WHERE r.holder_attempt_id = f.attempt_id;
    END IF;
    IF v_slotted > 0 THEN
      -- Slots 1.. (P2): each freed, and its key's count of them lowered by the key's items (a
      -- multi-table UPDATE changes a row once, however many items join it). From the counts to
      -- the key rows by primary key: joined the other way, the key table was scanned, each
      -- row locked as it was read, and claims holding some of them deadlocked with it.
      UPDATE result_group_mem f
        STRAIGHT_JOIN key_slots s FORCE INDEX (PRIMARY) ON s.resource_id = f.resource_id AND s.slot = f.slot
         SET s.attempt_id = NULL, s.updated_at = v_now
       WHERE f.resource_id > 0 AND f.slot > 0 AND s.attempt_id = f.attempt_id;
      UPDATE (SELECT resource_id, COUNT(*) AS n FROM result_group_mem
               WHERE resource_id > 0 AND slot > 0 GROUP BY resource_id) x
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = x.resource_id
         SET r.slot_holders = r.slot_holders - x.n, r.version = r.version + 1, r.updated_at = v_now;
    END IF;
    IF v_keyed > 0 THEN
      -- Each freed key passes to its next parked task: key_promote_next for the group. The
      -- dependent subquery reads each key's parked rows in ix_tasks_key_lane order and stops at
      -- the first due row of an ACTIVE queue (the shape key_promote_next measured; a join would
      -- sort every parked row of the key). An INSERT ... SELECT reads it without locks: the
      -- key rows are held, and every change of a key's parked tasks holds its key row, so what
      -- it finds stays as found; the promoted rows are locked by the UPDATE after it.
      -- A key of limit N (P1) may have a READY task already, or still be full after a lowered
      -- limit: only a key with room and no candidate takes one; several items of one key
      -- choose the same task (DISTINCT).
      INSERT INTO result_next_mem (resource_id, next_task)
      SELECT DISTINCT f.resource_id, COALESCE((
               SELECT t.id FROM tasks t FORCE INDEX (ix_tasks_key_lane)
                WHERE t.namespace_id = r.namespace_id AND t.concurrency_key = r.concurrency_key
                  AND t.lane = 'BLOCKED' AND t.available_at <= v_now
                  AND (SELECT q.state FROM queues q WHERE q.id = t.queue_id) = 'ACTIVE'
                ORDER BY t.priority, t.id LIMIT 1), 0)
        FROM result_group_mem f STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = f.resource_id
       WHERE f.resource_id > 0 AND r.candidate_task_id IS NULL
         AND (r.holder_attempt_id IS NOT NULL) + r.slot_holders < r.key_limit;
      -- Each task found made READY and its key's candidate, in one statement; a key with no
      -- task to promote has none waiting for it (key_promote_next's rule).
      UPDATE result_next_mem n
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = n.resource_id
        LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = n.next_task AND t.lane = 'BLOCKED'
         SET t.lane = 'READY', t.updated_at = v_now,
             r.candidate_task_id = COALESCE(t.id, r.candidate_task_id),
             r.waiting_since = IF(n.next_task = 0, NULL, r.waiting_since)
       WHERE t.id IS NOT NULL OR n.next_task = 0;
    END IF;
  END IF;

  -- The items in order: the group's that carry a text get it written, each row by its primary
  -- key (rows this call holds already); every other item goes through attempt_result_one.
  SET v_n = JSON_LENGTH(p_items);
  -- What the loop reads of the batch, the items outside the group and the group's texts, read
  -- apart when many (only then called: a helper's argument is a copy of the batch).
  IF v_n - v_fast + v_texts > 1 THEN
    CALL batch_items_read(p_items, v_n - v_fast + v_texts, v_items_read);
  END IF;
  WHILE v_i < v_n AND (v_fast < v_n OR v_texts > 0) DO  -- nothing left for the group's rest
    SET v_grouped = v_fast > 0 AND FIND_IN_SET(v_i, v_fast_seqs) > 0;
    SET v_texted = v_grouped AND FIND_IN_SET(v_i, v_text_seqs) > 0;
    IF v_texted OR NOT v_grouped THEN
      -- The item read out of the batch once, its fields then out of it: each JSON_EXTRACT
      -- over the whole batch reads all of it again up to the item (batch_items_read); a field
      -- per call made the per-item path cost half its time parsing (bench/README.md).
      IF v_items_read THEN
        SELECT item, result, error INTO v_item, v_result, v_text FROM batch_items WHERE seq = v_i;
      ELSE
        SET v_item = JSON_EXTRACT(p_items, CONCAT('$[', v_i, ']'));
        SET v_result = IF(JSON_TYPE(JSON_EXTRACT(v_item, '$.result')) = 'NULL', NULL,
                          NULLIF(JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.result')), '')),
            v_text = IF(JSON_TYPE(JSON_EXTRACT(v_item, '$.error')) = 'NULL', NULL,
                        NULLIF(JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.error')), ''));
      END IF;
    END IF;
    IF v_texted THEN
      -- task_finish's effects for SUCCEEDED (the result kept) and FAILED (the error kept); a
      -- retry waits with its error kept, as task_enter_lane puts it.
      SELECT attempt_id, task_id, state INTO v_attempt, v_task, v_state
        FROM result_group_mem WHERE seq = v_i;
      UPDATE attempts SET result = v_result, error = v_text WHERE id = v_attempt;
      UPDATE tasks
         SET result = IF(v_state = 'SUCCEEDED', COALESCE(v_result, result), result),
             error = IF(v_state = 'SUCCEEDED', error, COALESCE(v_text, error))
       WHERE id = v_task;
      SET v_texts = v_texts - 1;
    ELSEIF NOT v_grouped THEN
      SET v_id = JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.attempt_id'));
      SET v_task = NULL, v_duplicate = NULL, v_error = NULL;
      SAVEPOINT batch_item;
      item: BEGIN
        DECLARE EXIT HANDLER FOR SQLSTATE '45000'
        BEGIN
          GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
          ROLLBACK TO SAVEPOINT batch_item;
        END;
        CALL attempt_result_one(
          p_namespace_id, v_session, p_session_public_id, v_id,
          JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.outcome')),
          JSON_EXTRACT(v_item, '$.retryable'), v_result, v_text, v_limits, v_task, v_duplicate);
      END item;
      SET v_out = JSON_ARRAY_APPEND(v_out, '$',
                    JSON_OBJECT('seq', v_i, 'attempt_id', v_id, 'task', COALESCE(v_task, 0),
                                'duplicate', COALESCE(v_duplicate, 0), 'error', COALESCE(v_error, '')));
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  SET p_app = v_app, p_limits = v_limits, p_out = v_out;
END
