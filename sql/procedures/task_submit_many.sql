-- task_submit_many: task_submit for up to 100 tasks of one namespace in ONE transaction
-- (POST /v1/tasks/batch). Each item keeps its own idempotency and outcome: an item that fails
-- (NOT_FOUND, IDEMPOTENCY_CONFLICT, QUOTA_EXCEEDED) is rolled back to its savepoint and answered
-- with its error; the others commit. A key repeated inside the batch finds the earlier item's
-- record, as a second submission would.
-- Params: namespace, actor, items as a JSON array of objects {queue (internal id, scope-checked
--   by the shell), idempotency_key, fingerprint, handler, handler_version, payload_version,
--   payload (the stored JSON text, as a JSON string), business_key, concurrency_key, priority,
--   max_attempts, deadline_seconds, if_busy, debounce_delay_ms, debounce_max_wait_ms}, where 0
--   (or null) means none for max_attempts, deadline_seconds and the debounce (each at least 1
--   when given): no JSON nulls through JSON_TABLE, where MySQL 8 and MariaDB may read them
--   differently.
-- Result set, one row per item in order: seq, item_error ('CODE: message' or NULL), task_id
--   (public), created.
--
-- Two paths with one outcome. The common item, a task for a queue of this namespace whose
-- Idempotency-Key is new and named once in the batch, which waits for a busy key (if_busy
-- 'wait', or no key), while every quota it counts against has room for the whole batch, is
-- accepted set-based when it and every item before it are such items (ids keep the item
-- order): a statement per step for the group instead of ~12 per item.
-- Its effects are task_submit_one's in item order (a WAITING task, READY or parked by the rule
-- of key_lane, where an earlier item of the same key counts as the key's candidate, its
-- idempotency record, the key's candidate, the unfinished counters, a SUBMITTED history row).
-- Every other item (an if_busy 'skip' or 'replace' one among them) goes through
-- task_submit_one in order behind its savepoint, after the group, whose rows it sees as a
-- later submission would; they share no Idempotency-Key, and with room for the whole batch no
-- quota check depends on which group went first.
-- Locks, in order: a gate of the namespace (namespace_gate) and, under an unfinished-task
-- quota, the applications row; the batch's queues rows that have max_unfinished, and those of
-- the tasks its replacing items may replace (queues_lock: id order); every existing key row the batch names (keys_lock: key order, all at once), then
-- the token floors of the group's new keys (shared, key_floor's rule) and their new key rows
-- (inserted in key order, each at its floor); then the new tasks and idempotency rows;
-- then per remaining item those of task_submit_one (rows it holds already, a key it names
-- first, and the tasks it replaces, after their key). When a key row of the batch was made
-- by another submission after keys_lock, the group does not wait for it out of key order:
-- the batch starts over (1213).
-- Deadlocks and lock-wait timeouts roll back the whole batch; the shell retries it. A
-- concurrent submission of one of its Idempotency-Keys makes the batch's insert of that record
-- a duplicate once the other commits: the batch is rolled back and answered as a deadlock
-- (1213), and the shell's retry finds the record (task_submit's rule).
-- A direct producer's account may call it for the namespaces it is bound to only, and its
-- tasks' actor is its account's name (submitter_check).
CREATE PROCEDURE task_submit_many(IN p_namespace_id BIGINT UNSIGNED, IN p_actor VARCHAR(200),
                                  IN p_items MEDIUMTEXT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_n INT;
  DECLARE v_item MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
  DECLARE v_task BIGINT UNSIGNED;
  DECLARE v_created TINYINT;
  DECLARE v_error VARCHAR(512);
  DECLARE v_app BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_app_max INT UNSIGNED;
  DECLARE v_app_unfinished INT UNSIGNED;
  DECLARE v_fast INT DEFAULT 0;
  DECLARE v_keyed INT DEFAULT 0;
  DECLARE v_fast_seqs TEXT DEFAULT '';
  DECLARE v_ignored BIGINT;
  DECLARE v_gap INT;
  DECLARE v_now DATETIME(6);
  DECLARE v_out MEDIUMTEXT DEFAULT '[]';
  DECLARE v_limits TINYINT UNSIGNED DEFAULT 0;
  DECLARE v_limited_ids TEXT DEFAULT '';
  DECLARE v_keys MEDIUMTEXT;
  DECLARE v_items_read TINYINT DEFAULT 0;
  DECLARE v_rated BIGINT UNSIGNED;
  DECLARE v_rated_after BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_floors INT;
  DECLARE v_queues MEDIUMTEXT;
  DECLARE v_new_keys INT DEFAULT 0;
  DECLARE v_key_rows INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  DECLARE EXIT HANDLER FOR 1062
  BEGIN
    ROLLBACK;
    SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
      MESSAGE_TEXT = 'a concurrent submission with one of these Idempotency-Keys committed first; retry';
  END;

  -- The group's temporary table, before the transaction (sql/README.md, "Set-based paths").
  CREATE TEMPORARY TABLE IF NOT EXISTS submit_fast_mem (
    seq INT NOT NULL PRIMARY KEY, public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    queue_id BIGINT UNSIGNED NOT NULL,
    concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    resource_id BIGINT UNSIGNED NOT NULL DEFAULT 0, lane VARCHAR(10) NOT NULL DEFAULT 'READY',
    task_id BIGINT UNSIGNED NOT NULL DEFAULT 0, KEY (public_id)
  ) ENGINE=MEMORY;
  CREATE TEMPORARY TABLE IF NOT EXISTS submit_first_mem (
    concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    seq INT NOT NULL
  ) ENGINE=MEMORY;
  DELETE FROM submit_fast_mem;
  DELETE FROM submit_first_mem;

  IF SUBSTRING_INDEX(USER(), '@', 1) <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1) THEN
    CALL submitter_check(p_namespace_id, p_actor);  -- a caller other than the definer (L4)
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SET v_n = JSON_LENGTH(p_items);
  CALL namespace_gate(p_namespace_id, 2, v_app, v_limits);
  IF v_limits & 2 THEN  -- the row is locked by the gate
    SELECT max_unfinished, unfinished_tasks INTO v_app_max, v_app_unfinished
      FROM applications WHERE id = v_app;
  END IF;
  IF v_app IS NOT NULL THEN
    -- The batch's queues that count their unfinished tasks, locked in id order; a queue
    -- without the limit is never locked. With them, those of the tasks a replacing item may
    -- replace (replace_queues' read, for every such item at once).
    SELECT JSON_MERGE_PRESERVE(p_items, COALESCE(JSON_ARRAYAGG(JSON_OBJECT('queue', t.queue_id)), '[]'))
      INTO v_queues
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             k VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.concurrency_key',
             handler VARCHAR(200) PATH '$.handler',
             if_busy VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin PATH '$.if_busy')) j
      STRAIGHT_JOIN tasks t FORCE INDEX (ix_tasks_key_lane)
        ON t.namespace_id = p_namespace_id AND t.concurrency_key = j.k AND t.lane IS NOT NULL
       AND t.handler = j.handler
     WHERE j.if_busy = 'replace' AND j.k <> '';
    CALL queues_lock(p_namespace_id, v_queues, 8, v_limited_ids);
    -- Every key the batch names that has a row, in key order, before any other key row: the
    -- group's and the remaining items' alike.
    SELECT JSON_ARRAYAGG(k) INTO v_keys
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             k VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.concurrency_key')) j
     WHERE k <> '';
    IF v_keys IS NOT NULL THEN
      CALL keys_lock(p_namespace_id, v_keys, 0);
    END IF;
  END IF;
  IF v_app IS NOT NULL AND (v_app_max IS NULL OR v_app_unfinished + v_n <= v_app_max) THEN
    -- The clock is read after the locks: a call that waited must not stamp times earlier than
    -- the change it waited for.
    SET v_now = UTC_TIMESTAMP(6);
    INSERT INTO submit_fast_mem (seq, public_id, queue_id, concurrency_key)
    SELECT j.seq - 1, new_public_id(), q.id, j.concurrency_key
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             seq FOR ORDINALITY, queue BIGINT UNSIGNED PATH '$.queue',
             idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin PATH '$.idempotency_key',
             concurrency_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.concurrency_key',
             if_busy VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin PATH '$.if_busy',
             debounce INT UNSIGNED PATH '$.debounce_delay_ms')) j
      STRAIGHT_JOIN queues q ON q.id = j.queue AND q.namespace_id = p_namespace_id
      -- Keys named once in the batch: derived tables, each read once (a correlated subquery
      -- over JSON_TABLE parsed the whole batch again for every item).
      STRAIGHT_JOIN (SELECT idempotency_key FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
              idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin PATH '$.idempotency_key')) o
             GROUP BY idempotency_key HAVING COUNT(*) = 1) once ON once.idempotency_key = j.idempotency_key
     -- An item that may skip or replace decides on the key's state item by item, and a
     -- debounced one waits out its delay: both go one at a time.
     WHERE (j.concurrency_key = '' OR COALESCE(j.if_busy, 'wait') = 'wait')
       AND COALESCE(j.debounce, 0) = 0
       AND (q.max_unfinished IS NULL OR q.unfinished_tasks + v_n <= q.max_unfinished)
       AND NOT EXISTS (SELECT 1 FROM idempotency_records r
                        WHERE r.namespace_id = p_namespace_id AND r.idempotency_key = j.idempotency_key);
    -- Only the leading run of such items: tasks take ids in item order, and ids order a
    -- queue's tasks of one priority (FIFO), so no set-based item may overtake an earlier one.
    SELECT MIN(j.seq) - 1 INTO v_gap
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (seq FOR ORDINALITY)) j
      LEFT JOIN submit_fast_mem f ON f.seq = j.seq - 1
     WHERE f.seq IS NULL;
    IF v_gap IS NOT NULL THEN
      DELETE FROM submit_fast_mem WHERE seq > v_gap;
    END IF;
    SELECT COUNT(*), COALESCE(SUM(concurrency_key <> ''), 0) INTO v_fast, v_keyed FROM submit_fast_mem;
  END IF;
  IF v_fast > 0 THEN
    IF v_keyed > 0 THEN
      -- key_lane for the group: each key's row (created on first use at its floor, K7, R5) is
      -- locked; a task is READY (and its key's candidate) when the key has room (fewer holders
      -- than its limit) and no candidate and the queue is ACTIVE, else parked BLOCKED.
      -- A key named by several items: in item order, the first in an ACTIVE queue may become
      -- the candidate and every later one parks behind it, as one submission after another
      -- would (submit_first_mem: each key's first such item; MySQL cannot open submit_fast_mem twice
      -- in one statement).
      -- Keys without a row get one, in key order; the others are locked above, and an insert
      -- that met them would hold the table's AUTO-INC lock while it waited (innodb_autoinc_lock_mode
      -- 1), stalling every key insert of the server. Two batches making one new key meet here.
      -- A new key row starts at its stripe's token floor (R5), read under a shared lock held
      -- to the commit (key_floor's rule): the floors of the new keys' stripes are locked first,
      -- in one statement, then read by the insert.
      CALL key_floors_ensure(p_namespace_id);
      SELECT COUNT(*) INTO v_floors FROM key_floors
       WHERE namespace_id = p_namespace_id
         AND stripe IN (SELECT CRC32(f.concurrency_key) MOD 16 FROM submit_fast_mem f
                         WHERE f.concurrency_key <> ''
                           AND NOT EXISTS (SELECT 1 FROM concurrency_resources r
                                            WHERE r.namespace_id = p_namespace_id
                                              AND r.concurrency_key = f.concurrency_key))
       LOCK IN SHARE MODE;
      INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, created_at, updated_at)
      SELECT DISTINCT p_namespace_id, f.concurrency_key, k.floor, v_now, v_now FROM submit_fast_mem f
        STRAIGHT_JOIN key_floors k
          ON k.namespace_id = p_namespace_id AND k.stripe = CRC32(f.concurrency_key) MOD 16
       WHERE f.concurrency_key <> ''
         AND NOT EXISTS (SELECT 1 FROM concurrency_resources r
                          WHERE r.namespace_id = p_namespace_id AND r.concurrency_key = f.concurrency_key)
       ORDER BY f.concurrency_key
          ON DUPLICATE KEY UPDATE updated_at = concurrency_resources.updated_at;
      SET v_new_keys = ROW_COUNT();
      IF v_new_keys > 0 THEN
        CALL key_limit_init(p_namespace_id, 0);  -- the new rows' limits (P1)
      END IF;
      -- A key row that another transaction made and committed after keys_lock above is neither
      -- locked there nor made here (the insert's NOT EXISTS saw it). Read under a lock below,
      -- behind rows this batch holds past it, it closed a cycle with a transaction that took
      -- it first, in key order, and then waited for one of ours (a report's keys_lock).
      -- Counted by a plain read: the batch's key rows beyond those it locked and made start
      -- it over (1213: the shell retries the batch, whose keys_lock takes them in order).
      SELECT COUNT(*) INTO v_key_rows
        FROM (SELECT DISTINCT k FROM JSON_TABLE(v_keys, '$[*]' COLUMNS (
                k VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) j) j
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
          ON r.namespace_id = p_namespace_id AND r.concurrency_key = j.k;
      IF v_key_rows > @orbit_keys_locked + v_new_keys THEN
        SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
          MESSAGE_TEXT = 'a key row of this batch was made by another submission after the batch locked its keys; retry';
      END IF;
      INSERT INTO submit_first_mem (concurrency_key, seq)
      SELECT f.concurrency_key, MIN(f.seq) FROM submit_fast_mem f STRAIGHT_JOIN queues q ON q.id = f.queue_id
       WHERE f.concurrency_key <> '' AND q.state = 'ACTIVE' GROUP BY f.concurrency_key;
      UPDATE submit_fast_mem f
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
          ON r.namespace_id = p_namespace_id AND r.concurrency_key = f.concurrency_key
        LEFT JOIN submit_first_mem k ON k.concurrency_key = f.concurrency_key AND k.seq = f.seq
         SET f.resource_id = r.id,
             f.lane = IF((r.holder_attempt_id IS NOT NULL) + r.slot_holders < r.key_limit
                         AND r.candidate_task_id IS NULL AND k.seq IS NOT NULL
                         AND (r.rate_permits IS NULL
                              OR NOT key_rate_next(r.id, r.rate_permits, r.rate_seconds) > v_now),
                         'READY', 'BLOCKED')
       WHERE f.concurrency_key <> '';
      UPDATE submit_fast_mem f
        STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = f.resource_id
         SET r.waiting_since = v_now
       WHERE f.lane = 'BLOCKED' AND r.waiting_since IS NULL;
    END IF;
    INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, idempotency_key,
                       handler, handler_version, payload_version, payload, payload_bytes,
                       business_key, concurrency_key, priority, state, lane, max_attempts,
                       available_at, deadline_at, created_at, updated_at)
    SELECT f.public_id, p_namespace_id, q.application_id, q.id, j.idempotency_key, j.handler,
           j.handler_version, j.payload_version, j.payload, LENGTH(j.payload),
           COALESCE(j.business_key, ''),
           f.concurrency_key, j.priority, 'WAITING', f.lane, COALESCE(NULLIF(j.max_attempts, 0), q.max_attempts),
           v_now, IF(COALESCE(j.deadline_seconds, 0) = 0, NULL,
                     v_now + INTERVAL j.deadline_seconds SECOND),
           v_now, v_now
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             seq FOR ORDINALITY, queue BIGINT UNSIGNED PATH '$.queue',
             idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin PATH '$.idempotency_key',
             handler VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.handler',
             handler_version VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.handler_version',
             payload_version VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.payload_version',
             payload MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.payload',
             business_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.business_key',
             priority TINYINT UNSIGNED PATH '$.priority',
             max_attempts INT UNSIGNED PATH '$.max_attempts',
             deadline_seconds INT UNSIGNED PATH '$.deadline_seconds')) j
      STRAIGHT_JOIN submit_fast_mem f FORCE INDEX (PRIMARY) ON f.seq = j.seq - 1
      STRAIGHT_JOIN queues q FORCE INDEX (PRIMARY) ON q.id = f.queue_id
     -- Sorted by the first table's column, every join by key: ordering by the group's column,
     -- or a join buffer (a namespace of few queues scanned them), made MariaDB sort the joined
     -- rows, payload text and all, in an on-disk temporary table (0.4 ms of a batch of 10).
     ORDER BY j.seq;
    -- From the group's rows to the tables (STRAIGHT_JOIN): a temporary table has no statistics.
    UPDATE submit_fast_mem f STRAIGHT_JOIN tasks t FORCE INDEX (uq_tasks_public_id) ON t.public_id = f.public_id SET f.task_id = t.id;
    INSERT INTO idempotency_records (namespace_id, idempotency_key, fingerprint, task_id, created_at)
    SELECT p_namespace_id, j.idempotency_key, j.fingerprint, f.task_id, v_now
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (
             seq FOR ORDINALITY,
             idempotency_key VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin PATH '$.idempotency_key',
             fingerprint CHAR(64) CHARACTER SET ascii COLLATE ascii_bin PATH '$.fingerprint')) j
      STRAIGHT_JOIN submit_fast_mem f ON f.seq = j.seq - 1;
    IF v_keyed > 0 THEN
      UPDATE submit_fast_mem f STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = f.resource_id
         SET r.candidate_task_id = f.task_id WHERE f.lane = 'READY';
      -- A key whose rate (P6) lets no permit begin yet parked its first task above:
      -- key_promote_next makes it the key's candidate, waiting DELAYED for the rate.
      rated: LOOP
        SET v_rated = NULL;
        SELECT MIN(f.resource_id) INTO v_rated
          FROM submit_fast_mem f STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = f.resource_id
         WHERE f.resource_id > v_rated_after AND r.rate_permits IS NOT NULL
           AND r.candidate_task_id IS NULL;
        IF v_rated IS NULL THEN LEAVE rated; END IF;
        CALL key_promote_next(v_rated);
        SET v_rated_after = v_rated;
      END LOOP;
    END IF;
    -- The counters kept: the application's under its quota, a queue's under its limit (their
    -- rows are locked above).
    IF v_limits & 2 THEN
      UPDATE applications SET unfinished_tasks = unfinished_tasks + v_fast WHERE id = v_app;
    END IF;
    IF v_limited_ids <> '' THEN
      UPDATE queues q
        JOIN (SELECT queue_id, COUNT(*) AS n FROM submit_fast_mem GROUP BY queue_id) c ON c.queue_id = q.id
         SET q.unfinished_tasks = q.unfinished_tasks + c.n
       WHERE q.max_unfinished IS NOT NULL;
    END IF;
    INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                              from_state, to_state, actor, details, created_at)
    SELECT task_id, p_namespace_id, NULL, NULL, 'SUBMITTED', NULL, 'WAITING', p_actor,
           CONCAT('lane=', lane), v_now
      FROM submit_fast_mem ORDER BY seq;
    SELECT GROUP_CONCAT(seq),
           JSON_ARRAYAGG(JSON_OBJECT('seq', seq, 'task', task_id, 'created', 1, 'error', ''))
      INTO v_fast_seqs, v_out FROM submit_fast_mem;
  END IF;

  -- The items outside the group, read apart when many (only then called: a helper's argument
  -- is a copy of the batch).
  IF v_n - v_fast > 1 THEN
    CALL batch_items_read(p_items, v_n - v_fast, v_items_read);
  END IF;
  batch_items: WHILE v_i < v_n AND v_fast < v_n DO  -- nothing left when the group holds every item
    IF v_fast > 0 AND FIND_IN_SET(v_i, v_fast_seqs) > 0 THEN
      SET v_i = v_i + 1;
      ITERATE batch_items;
    END IF;
    -- The item read out of the batch once, its fields then out of it: each JSON_EXTRACT over
    -- the whole batch reads all of it again up to the item (batch_items_read); a field per
    -- call made the per-item path cost half its time parsing (bench/README.md).
    IF v_items_read THEN
      SELECT item INTO v_item FROM batch_items WHERE seq = v_i;
    ELSE
      SET v_item = JSON_EXTRACT(p_items, CONCAT('$[', v_i, ']'));
    END IF;
    SET v_task = NULL, v_created = NULL, v_error = NULL;
    SAVEPOINT batch_item;
    item: BEGIN
      DECLARE EXIT HANDLER FOR SQLSTATE '45000'
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_error = MESSAGE_TEXT;
        ROLLBACK TO SAVEPOINT batch_item;
      END;
      CALL task_submit_one(
        p_namespace_id,
        JSON_EXTRACT(v_item, '$.queue'),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.idempotency_key')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.fingerprint')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.handler')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.handler_version')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.payload_version')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.payload')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.business_key')),
        JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.concurrency_key')),
        JSON_EXTRACT(v_item, '$.priority'),
        IF(JSON_TYPE(JSON_EXTRACT(v_item, '$.max_attempts')) = 'NULL', NULL,
           NULLIF(JSON_EXTRACT(v_item, '$.max_attempts'), 0)),
        IF(JSON_TYPE(JSON_EXTRACT(v_item, '$.deadline_seconds')) = 'NULL', NULL,
           NULLIF(JSON_EXTRACT(v_item, '$.deadline_seconds'), 0)),
        COALESCE(JSON_UNQUOTE(JSON_EXTRACT(v_item, '$.if_busy')), 'wait'),
        NULLIF(JSON_EXTRACT(v_item, '$.debounce_delay_ms'), 0),
        NULLIF(JSON_EXTRACT(v_item, '$.debounce_max_wait_ms'), 0),
        p_actor, NULL, NULL, NULL, v_limits & 2, v_limited_ids, v_task, v_created);
    END item;
    SET v_out = JSON_ARRAY_APPEND(v_out, '$',
                  JSON_OBJECT('seq', v_i, 'task', COALESCE(v_task, 0), 'created', COALESCE(v_created, 0),
                              'error', COALESCE(v_error, '')));
    SET v_i = v_i + 1;
  END WHILE batch_items;
  COMMIT;
  SELECT j.seq, NULLIF(j.error, '') AS item_error, t.public_id AS task_id, j.created
    FROM JSON_TABLE(v_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                           task BIGINT UNSIGNED PATH '$.task',
                                           created TINYINT PATH '$.created',
                                           error VARCHAR(512) PATH '$.error')) j
    LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = j.task
   ORDER BY j.seq;
END
