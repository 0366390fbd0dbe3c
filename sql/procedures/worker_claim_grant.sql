-- worker_claim_grant: the body of worker_claim and of worker_report_claim's claim.
-- Helper inside the caller's transaction: no transaction control, no handler. The caller
-- resolved the session (p_session_id, its application p_app_id), made the candidates table
-- (worker_claim_tables) and answers with session_assignments(p_session_id, p_first_attempt)
-- after its commit.
-- Params: namespace, session internal id, its application, its public id (for the history's
-- actor), max (1..100), the application's quotas as the caller's gate read them
-- (namespace_gate, which locked the application row where it has one), and p_skip_keys: 1
-- when the caller's transaction holds key rows already (worker_report_claim's results), so
-- that a candidate whose key row another transaction holds is left for a later claim rather
-- than waited for out of key order (a candidate the caller's results promoted, listed in
-- result_next_mem, is of a key row it holds: nothing to wait for); p_start: 1 when the caller
-- was asked to start what it grants (W3): both grant paths write attempts and tasks RUNNING at
-- once, with a STARTED history row after each CLAIMED one. Out: the first attempt id granted
-- by this call (NULL: none).
-- Errors: STATE_CONFLICT (session closed), before anything is written.
--
-- Locks, in the documented order (after the caller's gate and application row): the session's
-- queues rows that have a limit (queues_lock: id order; a queue without one is read, never
-- locked), the worker_sessions row, candidate tasks rows (FOR UPDATE SKIP LOCKED through
-- ix_tasks_claim, or ix_tasks_queue_lane_key for a session without concurrency_keys), the
-- keyed candidates' concurrency_resources rows (keys_lock: key order, all at once), then the
-- new attempts and permits rows.
--
-- K8 without a scan: keyed tasks whose key is held are parked (lane BLOCKED) and each free key
-- has at most one READY candidate, so ix_tasks_claim (queue_id, lane, priority, id) holds only
-- claimable rows and the LIMIT never meets a blocked one. Two tasks of one key can never both
-- be READY, and the key row is re-checked under its lock, so one batch never grants a key
-- twice; the write of the key's holder refuses a key that has one anyway (INTERNAL). A key
-- of limit N (P1) has one READY candidate at a time too, while it has room; each grant of it
-- (attempt_grant) promotes the next.
--
-- Fairness (W2): each call takes at most ceil(candidates seen / (1 + idle others)) tasks, where
-- idle others are the OTHER open sessions sharing one of these queues, seen in the last 5
-- seconds, with nothing in flight. A burst is split with the nodes that are idle instead of
-- going whole to the first poller; nodes that are already working do not shrink the share.
--
-- Payload budget (L1): the grants' payloads together stay within 1 MiB, the request body's
-- bound; the first grant is made whatever its size. A claim of 100 tasks of 1 MiB each
-- answered 100 MiB, built by one server worker while every other request it served waited.
--
-- Recovery (expired leases, due backoff) runs before this transaction (session_recover).
CREATE PROCEDURE worker_claim_grant(IN p_namespace_id BIGINT UNSIGNED, IN p_session_id BIGINT UNSIGNED,
                                    IN p_app_id BIGINT UNSIGNED,
                                    IN p_session_public_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin,
                                    IN p_max INT UNSIGNED, IN p_limits TINYINT UNSIGNED,
                                    IN p_skip_keys TINYINT, IN p_start TINYINT,
                                    OUT p_first_attempt BIGINT UNSIGNED)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_session BIGINT UNSIGNED;
  DECLARE v_app BIGINT UNSIGNED;
  DECLARE v_app_max INT UNSIGNED;
  DECLARE v_app_active INT UNSIGNED;
  DECLARE v_state VARCHAR(10);
  DECLARE v_capacity INT UNSIGNED;
  DECLARE v_in_flight INT UNSIGNED;
  DECLARE v_keys TINYINT;
  DECLARE v_want INT DEFAULT 0;
  DECLARE v_found INT DEFAULT 0;
  DECLARE v_live INT DEFAULT 0;
  DECLARE v_limited_ids TEXT DEFAULT '';
  DECLARE v_cap INT DEFAULT 0;
  DECLARE v_granted INT DEFAULT 0;
  DECLARE v_queue BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_item BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_first_attempt BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_now DATETIME(6);
  DECLARE v_actor VARCHAR(200);
  DECLARE v_queues INT DEFAULT 0;
  DECLARE v_limited INT DEFAULT 0;
  DECLARE v_keyed INT DEFAULT 0;
  DECLARE v_unheld INT DEFAULT 0;
  DECLARE v_floor BIGINT UNSIGNED;
  DECLARE v_ceiling BIGINT UNSIGNED;
  DECLARE v_ignored BIGINT;
  DECLARE v_drop INT DEFAULT 0;
  DECLARE v_lease INT UNSIGNED;
  DECLARE v_only_queue BIGINT UNSIGNED;
  DECLARE v_only_lease INT UNSIGNED;
  DECLARE v_take INT DEFAULT 0;
  DECLARE v_bad INT DEFAULT 1;
  DECLARE v_locked INT DEFAULT 0;
  DECLARE v_key_list MEDIUMTEXT;
  DECLARE v_queue_ids MEDIUMTEXT;
  DECLARE v_bytes BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_fit INT DEFAULT 0;
  DECLARE v_slotted INT DEFAULT 0;
  DECLARE v_written INT DEFAULT 0;
  DECLARE v_room INT DEFAULT 0;
  DECLARE v_unseen TEXT DEFAULT NULL;
  -- The payload bytes one claim's grants may carry together (the first is granted whatever
  -- its size): the request body's bound (validation.MAX_BODY_BYTES), so that no answer
  -- carries more than a request may.
  DECLARE c_payload_budget INT UNSIGNED DEFAULT 1048576;

  SET v_session = p_session_id, v_app = p_app_id;
  SET v_actor = CONCAT('session:', p_session_public_id);
  IF p_limits & 1 THEN  -- the row is locked by the caller's gate
    SELECT max_active_attempts, active_attempts INTO v_app_max, v_app_active
      FROM applications WHERE id = v_app;
  END IF;
  -- The counts spare statements below: a second queue to walk, a queue permit limit to check,
  -- queue rows to lock. For a session of one queue (the usual worker) the queue and its
  -- lease, when ACTIVE, are read here too, sparing the walks' lookups of it. A plain read: a
  -- queue's limits never change and its state changes only under every gate of the namespace.
  SELECT COUNT(*), COUNT(max_concurrency), COUNT(COALESCE(max_concurrency, max_unfinished)),
         MIN(id), MIN(IF(state = 'ACTIVE', lease_seconds, NULL))
    INTO v_queues, v_limited, v_locked, v_only_queue, v_only_lease FROM queues
   WHERE id IN (SELECT queue_id FROM worker_session_queues WHERE session_id = v_session);
  -- Queues with a limit, locked in id order (their counters are kept).
  IF v_locked > 0 THEN
    SELECT JSON_ARRAYAGG(JSON_OBJECT('queue', queue_id)) INTO v_queue_ids
      FROM worker_session_queues WHERE session_id = v_session;
    CALL queues_lock(p_namespace_id, v_queue_ids, 12, v_limited_ids);
  END IF;
  SELECT state, capacity, in_flight, concurrency_keys INTO v_state, v_capacity, v_in_flight, v_keys
    FROM worker_sessions WHERE id = v_session FOR UPDATE;
  IF v_state <> 'OPEN' THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'STATE_CONFLICT: worker session is closed; say hello again';
  END IF;

  -- The clock is read after the locks: a call that waited must not stamp times earlier than
  -- the change it waited for.
  SET v_now = UTC_TIMESTAMP(6);
  SET v_want = LEAST(p_max, GREATEST(CAST(v_capacity AS SIGNED) - CAST(v_in_flight AS SIGNED), 0));

  IF v_want > 0 THEN
    -- Candidates: the best v_want READY rows of each ACTIVE queue of the session. One bounded
    -- index range per queue, so the work is (queues x want), never the backlog. Each row is
    -- read under its lock (the latest version, READY), so what a grant needs from it is taken
    -- here: its attempt number, its lease's end (the queue's lease, cut at the deadline),
    -- whether it names a key and whether its deadline has passed.
    queue_loop: LOOP
      SET v_next = NULL;
      IF v_queues = 1 THEN
        IF v_only_lease IS NOT NULL THEN SET v_next = v_only_queue, v_lease = v_only_lease; END IF;
      ELSE
        SELECT wq.queue_id, q.lease_seconds INTO v_next, v_lease FROM worker_session_queues wq
          JOIN queues q ON q.id = wq.queue_id AND q.state = 'ACTIVE'
         WHERE wq.session_id = v_session AND wq.queue_id > v_queue
         ORDER BY wq.queue_id LIMIT 1;
      END IF;
      IF v_next IS NULL THEN LEAVE queue_loop; END IF;
      SET v_queue = v_next;
      -- A session without concurrency_keys reads the unkeyed rows' own range: through
      -- ix_tasks_claim it would read every READY keyed row ahead of them (migration 000007).
      IF v_keys = 1 THEN
        INSERT INTO claim_grants_mem (task_id, priority, take, queue_id, keyed, late,
                                     attempt_number, expires_at, payload_bytes)
        SELECT id, priority, 1, queue_id, concurrency_key <> '', COALESCE(deadline_at <= v_now, 0),
               attempts_used + 1, LEAST(COALESCE(deadline_at, v_now + INTERVAL v_lease SECOND),
                                        v_now + INTERVAL v_lease SECOND),
               COALESCE(payload_bytes, LENGTH(payload))
          FROM tasks FORCE INDEX (ix_tasks_claim)
         WHERE queue_id = v_queue AND lane = 'READY'
         ORDER BY priority, id LIMIT v_want
           FOR UPDATE SKIP LOCKED;
      ELSE
        INSERT INTO claim_grants_mem (task_id, priority, take, queue_id, keyed, late,
                                     attempt_number, expires_at, payload_bytes)
        SELECT id, priority, 1, queue_id, 0, COALESCE(deadline_at <= v_now, 0),
               attempts_used + 1, LEAST(COALESCE(deadline_at, v_now + INTERVAL v_lease SECOND),
                                        v_now + INTERVAL v_lease SECOND),
               COALESCE(payload_bytes, LENGTH(payload))
          FROM tasks FORCE INDEX (ix_tasks_queue_lane_key)
         WHERE queue_id = v_queue AND lane = 'READY' AND concurrency_key = ''
         ORDER BY priority, id LIMIT v_want
           FOR UPDATE SKIP LOCKED;
      END IF;
      SET v_found = v_found + ROW_COUNT();
      IF v_queues = 1 THEN LEAVE queue_loop; END IF;
    END LOOP;

    -- Only a committed task is granted. Beside single submissions, the locking read above has
    -- (rarely) returned a task whose submission had not committed yet: the grant's plain reads
    -- of it below then found no row, and the task was left RUNNING with no attempt (MariaDB
    -- 10.11, a report's claim: about one task in 80,000). A plain read finds such a candidate,
    -- which is dropped; a later claim takes it (sql/README.md, "Locking reads").
    IF v_found > 0 THEN
      SELECT GROUP_CONCAT(c.task_id) INTO v_unseen
        FROM claim_grants_mem c LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id
       WHERE t.id IS NULL;
      IF v_unseen IS NOT NULL THEN
        DELETE FROM claim_grants_mem WHERE FIND_IN_SET(task_id, v_unseen);
        SELECT COUNT(*) INTO v_found FROM claim_grants_mem;
      END IF;
    END IF;

    -- The keyed candidates' key rows, locked before their tokens are computed (K7) and before
    -- any grant, all at once in key order (keys_lock), as every transaction that takes more
    -- than one key row takes them. A lone candidate's key needs no order: attempt_grant locks
    -- it. When this transaction holds key rows already (p_skip_keys), a row another holds is
    -- skipped and its candidate left READY for a later claim: waiting for it here, out of key
    -- order, could close a cycle with a submission that holds it and waits for one of ours.
    -- Counted only where the answer decides something: the keyed candidates, and those whose
    -- key row this transaction does not hold yet. A candidate the caller's results just
    -- promoted (worker_report_claim's group path, result_next_mem) is of a key row it holds:
    -- nothing to wait for or skip, so when every keyed candidate is one (a hot key's turn)
    -- keys_lock is not needed.
    IF p_skip_keys THEN
      SELECT COALESCE(SUM(c.keyed), 0), COALESCE(SUM(c.keyed = 1 AND n.next_task IS NULL), 0)
        INTO v_keyed, v_unheld
        FROM claim_grants_mem c LEFT JOIN result_next_mem n ON n.next_task = c.task_id;
    ELSEIF v_found > 1 THEN
      SELECT COALESCE(SUM(keyed), 0) INTO v_keyed FROM claim_grants_mem;
      SET v_unheld = v_keyed;  -- a claim alone holds no key row before keys_lock
    END IF;
    IF v_unheld > 0 THEN
      SELECT JSON_ARRAYAGG(t.concurrency_key) INTO v_key_list
        FROM claim_grants_mem c STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id
       WHERE c.keyed = 1;
      CALL keys_lock(p_namespace_id, v_key_list, p_skip_keys);
      -- Read again after the key rows: a grant must not be stamped before a release of the
      -- key (another of its slots) that this claim waited for.
      SET v_now = UTC_TIMESTAMP(6);
      IF p_skip_keys THEN
        DELETE c FROM claim_grants_mem c
          STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id
          LEFT JOIN locked_keys_mem k ON k.concurrency_key = t.concurrency_key
         WHERE c.keyed = 1 AND k.concurrency_key IS NULL;
        SET v_found = v_found - ROW_COUNT();
      END IF;
    END IF;

    -- The fair share can only split a burst of more than one, for a claim of more than one.
    IF v_found > 1 AND v_want > 1 THEN
      -- From the sessions seen in the last 5 seconds (ix_worker_sessions_seen), not from every
      -- session ever registered on these queues: a worker process registers one of its own.
      -- Each is then looked up by key with each queue of this session.
      SELECT COUNT(DISTINCT s.id) INTO v_live
        FROM worker_sessions s FORCE INDEX (ix_worker_sessions_seen)
        STRAIGHT_JOIN worker_session_queues mine FORCE INDEX (PRIMARY) ON mine.session_id = v_session
        STRAIGHT_JOIN worker_session_queues other FORCE INDEX (PRIMARY)
          ON other.session_id = s.id AND other.queue_id = mine.queue_id
       WHERE s.namespace_id = p_namespace_id AND s.last_seen_at >= v_now - INTERVAL 5 SECOND
         AND s.id <> v_session AND s.state = 'OPEN' AND s.in_flight = 0;
      SET v_cap = LEAST(v_want, CEIL(v_found / (1 + v_live)));
    ELSE
      SET v_cap = LEAST(v_want, v_found);
    END IF;

    -- Grant in (priority, id) order across the queues. Under a quota the application row is
    -- locked by this claim's gate, so its active count read under that lock plus this call's
    -- grants is exact.
    SET v_take = LEAST(v_cap, IF(v_app_max IS NULL, v_cap,
                                 GREATEST(CAST(v_app_max AS SIGNED) - CAST(v_app_active AS SIGNED), 0)));
    -- L1: the grants' payloads together stay within c_payload_budget, the first grant's
    -- whatever its size: the answer carries them all, and one server worker builds it while
    -- the other requests it serves wait. The leading candidates that fit, in grant order: a
    -- running total, as worker_hello pages its in-flight attempts.
    IF v_take > 1 THEN
      SELECT SUM(payload_bytes) INTO v_bytes FROM claim_grants_mem;
      IF v_bytes > c_payload_budget THEN
        SELECT COUNT(*) INTO v_fit
          FROM (SELECT ROW_NUMBER() OVER (ORDER BY priority, task_id) AS n,
                       SUM(payload_bytes) OVER (ORDER BY priority, task_id) AS total
                  FROM claim_grants_mem) w
         WHERE w.n = 1 OR w.total <= c_payload_budget;
        SET v_take = LEAST(v_take, v_fit), v_cap = LEAST(v_cap, v_take);
      END IF;
    END IF;
    IF v_take > 1 THEN
      -- Fast path: when each of the first v_take candidates would be granted by attempt_grant
      -- (still READY, deadline ahead, its queue has room for this claim's grants, its key free
      -- with this task as candidate and token space left), they are granted set-based, a
      -- statement per step instead of ~12 per grant, with attempt_grant's effects. Otherwise
      -- the loop below grants one by one, skipping what attempt_grant refuses. A single grant
      -- never takes this path: the set-based steps cost more than one attempt_grant, and an
      -- unkeyed one is written inline below.
      -- Every candidate was inserted taken; the last ones beyond v_take are put back.
      IF v_take < v_found THEN
        SET v_drop = v_found - v_take;
        UPDATE claim_grants_mem SET take = 0 ORDER BY priority DESC, task_id DESC LIMIT v_drop;
      END IF;
      SELECT SUM(keyed), SUM(late) INTO v_keyed, v_bad FROM claim_grants_mem WHERE take = 1;
      IF v_keyed > 0 THEN
        -- The key rows are locked above (keys_lock), or by the caller's results, which
        -- promoted these candidates. STRAIGHT_JOIN: from the candidates to their rows, never
        -- from a key to its (parked) tasks.
        CALL token_range(v_floor, v_ceiling);
        UPDATE claim_grants_mem c
          STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id
          STRAIGHT_JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key)
            ON r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key
           SET c.resource_id = r.id,
               c.token = IF(r.token >= v_ceiling, 0, GREATEST(r.token + 1, v_floor)),
               c.key_limit = r.key_limit, c.slotted = r.holder_attempt_id IS NOT NULL,
               c.room_after = (r.holder_attempt_id IS NOT NULL) + r.slot_holders + 1 < r.key_limit
         WHERE c.take = 1 AND c.keyed = 1;
        -- A keyed grant needs room in its key (P1: fewer holders than its limit), this task
        -- its candidate, and token space left (a key row that is missing leaves resource_id
        -- and token 0).
        -- Counted in the same read: the grants that take a slot of key_slots (slot 0 held)
        -- and those that leave their key room for another holder.
        SELECT COALESCE(SUM(c.late = 1
                            OR (c.keyed = 1
                                AND (r.id IS NULL
                                     OR (r.holder_attempt_id IS NOT NULL) + r.slot_holders >= r.key_limit
                                     OR NOT (r.candidate_task_id <=> c.task_id) OR c.token = 0
                                     -- a key with a rate (P6) takes attempt_grant, which
                                     -- records the grant's time
                                     OR r.rate_permits IS NOT NULL))), 0),
               COALESCE(SUM(c.slotted), 0), COALESCE(SUM(c.room_after), 0)
          INTO v_bad, v_slotted, v_room
          FROM claim_grants_mem c
          LEFT JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = c.resource_id
         WHERE c.take = 1;
        -- Slot 0 held (P2): the lowest free slot of key_slots below the limit, or the next one
        -- made (slot rows are dense; the key has room, so one of the two is below it). One
        -- grant a key a claim: a key has one READY task. Plain reads: the key rows are held.
        IF v_bad = 0 AND v_slotted > 0 THEN
          UPDATE claim_grants_mem c
             SET c.slot = COALESCE((SELECT MIN(s.slot) FROM key_slots s
                                     WHERE s.resource_id = c.resource_id AND s.attempt_id IS NULL
                                       AND s.slot < c.key_limit),
                                   (SELECT COALESCE(MAX(s.slot), 0) + 1 FROM key_slots s
                                     WHERE s.resource_id = c.resource_id)),
                 c.new_slot = NOT EXISTS (SELECT 1 FROM key_slots s
                                           WHERE s.resource_id = c.resource_id
                                             AND s.attempt_id IS NULL AND s.slot < c.key_limit)
           WHERE c.take = 1 AND c.slotted = 1;
        END IF;
      END IF;
      IF v_bad = 0 AND v_limited > 0 THEN
        SELECT COUNT(*) INTO v_bad
          FROM (SELECT queue_id, COUNT(*) AS n FROM claim_grants_mem WHERE take = 1 GROUP BY queue_id) c
          JOIN queues q ON q.id = c.queue_id
         WHERE q.max_concurrency IS NOT NULL AND q.active_attempts + c.n > q.max_concurrency;
      END IF;
    END IF;
    IF v_take > 1 AND v_bad = 0 THEN
      -- Started at once when the caller asked (p_start): one write of each row where a grant
      -- and then a start wrote each twice, moving its index entries twice (5-8% of a hot
      -- key's turn, bench/README.md).
      INSERT INTO attempts (public_id, task_id, namespace_id, application_id, queue_id,
                            session_id, attempt_number, concurrency_token, concurrency_slot,
                            state, lease_expires_at, created_at, started_at)
      SELECT new_public_id(), t.id, t.namespace_id, t.application_id, t.queue_id, v_session,
             c.attempt_number, c.token, c.slot, IF(p_start, 'RUNNING', 'LEASED'), c.expires_at,
             v_now, IF(p_start, v_now, NULL)
        FROM claim_grants_mem c STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id
       WHERE c.take = 1 ORDER BY c.priority, c.task_id;
      -- The statement's first generated id is its least (an AUTO_INCREMENT only grows), in
      -- every innodb_autoinc_lock_mode: no read of the group for it.
      SET v_granted = ROW_COUNT(), v_first_attempt = LAST_INSERT_ID();
      IF v_granted <> v_take THEN  -- every candidate taken has its attempt, or none is granted
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: a claimed task was not found';
      END IF;
      UPDATE claim_grants_mem c
        STRAIGHT_JOIN attempts a FORCE INDEX (uq_attempts_number) ON a.task_id = c.task_id AND a.attempt_number = c.attempt_number
         SET c.attempt_id = a.id WHERE c.take = 1;
      -- A queue permit for each grant and a key permit for each keyed one, in one statement:
      -- MySQL cannot open one temporary table twice in a query, so the kinds are a derived row
      -- pair joined to the group.
      INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, created_at)
      SELECT c.attempt_id, k.kind, IF(k.kind = 'KEY', c.resource_id, c.queue_id),
             IF(k.kind = 'KEY', c.resource_id, NULL), c.expires_at, v_now
        FROM claim_grants_mem c
        STRAIGHT_JOIN (SELECT 'QUEUE' AS kind UNION ALL SELECT 'KEY') k
       WHERE c.take = 1 AND (k.kind = 'QUEUE' OR c.resource_id > 0);
      IF v_keyed > 0 THEN
        -- The holder is written only where there is none: the write itself refuses a second
        -- holder, whatever the reads above concluded (sql/README.md, "Keyed concurrency").
        IF v_keyed > v_slotted THEN
          UPDATE claim_grants_mem c STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = c.resource_id AND c.take = 1
             SET r.token = c.token, r.version = r.version + 1, r.holder_attempt_id = c.attempt_id,
                 r.candidate_task_id = NULL, r.updated_at = v_now
           WHERE r.holder_attempt_id IS NULL AND c.slotted = 0;
          SET v_written = ROW_COUNT();
        END IF;
        IF v_slotted > 0 THEN
          -- Slots 1.. (P2): a free row taken only where it is still free; the rows to make, only
          -- while a key has not made all of its (they stay, so that is rare).
          UPDATE claim_grants_mem c
            STRAIGHT_JOIN key_slots s FORCE INDEX (PRIMARY)
              ON s.resource_id = c.resource_id AND s.slot = c.slot
             SET s.attempt_id = c.attempt_id, s.updated_at = v_now
           WHERE c.take = 1 AND c.slotted = 1 AND c.new_slot = 0 AND s.attempt_id IS NULL;
          SET v_written = v_written + ROW_COUNT();
          IF v_written < v_keyed THEN
            INSERT INTO key_slots (resource_id, slot, attempt_id, updated_at)
            SELECT resource_id, slot, attempt_id, v_now FROM claim_grants_mem
             WHERE take = 1 AND slotted = 1 AND new_slot = 1;
            SET v_written = v_written + ROW_COUNT();
          END IF;
          UPDATE claim_grants_mem c STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = c.resource_id
             SET r.token = c.token, r.version = r.version + 1, r.slot_holders = r.slot_holders + 1,
                 r.candidate_task_id = NULL, r.updated_at = v_now
           WHERE c.take = 1 AND c.slotted = 1;
        END IF;
        IF v_written <> v_keyed THEN
          SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: a held key was about to be granted again';
        END IF;
      END IF;
      UPDATE claim_grants_mem c STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = c.task_id AND c.take = 1
         SET t.state = IF(p_start, 'RUNNING', 'LEASED'), t.lane = NULL, t.attempts_used = c.attempt_number,
             t.current_attempt_id = c.attempt_id, t.updated_at = v_now;
      -- A key a grant left room in (P1) passes its turn to its next parked task at once, as
      -- key_promote_next does (the shape result groups use: a dependent subquery that stops at
      -- the first due row of an ACTIVE queue, read without locks under the held key rows).
      IF v_room > 0 THEN
        INSERT INTO claim_next_mem (resource_id, next_task)
        SELECT c.resource_id, COALESCE((
                 SELECT t.id FROM tasks t FORCE INDEX (ix_tasks_key_lane)
                  WHERE t.namespace_id = r.namespace_id AND t.concurrency_key = r.concurrency_key
                    AND t.lane = 'BLOCKED' AND t.available_at <= v_now
                    AND (SELECT q.state FROM queues q WHERE q.id = t.queue_id) = 'ACTIVE'
                  ORDER BY t.priority, t.id LIMIT 1), 0)
          FROM claim_grants_mem c STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = c.resource_id
         WHERE c.take = 1 AND c.room_after = 1;
        UPDATE claim_next_mem n
          STRAIGHT_JOIN concurrency_resources r FORCE INDEX (PRIMARY) ON r.id = n.resource_id
          LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = n.next_task AND t.lane = 'BLOCKED'
           SET t.lane = 'READY', t.updated_at = v_now,
               r.candidate_task_id = COALESCE(t.id, r.candidate_task_id),
               r.waiting_since = IF(n.next_task = 0, NULL, r.waiting_since)
         WHERE t.id IS NOT NULL OR n.next_task = 0;
      END IF;
      -- Queue permits are counted where a queue has max_concurrency (its row is locked above).
      IF v_limited > 0 AND v_queues = 1 THEN  -- by key, without grouping the candidates
        UPDATE queues SET active_attempts = active_attempts + v_granted WHERE id = v_only_queue;
      ELSEIF v_limited > 0 THEN
        UPDATE queues q
          JOIN (SELECT queue_id, COUNT(*) AS n FROM claim_grants_mem
                 WHERE take = 1 AND FIND_IN_SET(queue_id, v_limited_ids) GROUP BY queue_id) c
            ON c.queue_id = q.id
           SET q.active_attempts = q.active_attempts + IF(q.max_concurrency IS NULL, 0, c.n);
      END IF;
      INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                from_state, to_state, actor, details, created_at)
      SELECT c.task_id, p_namespace_id, c.attempt_id, NULLIF(c.token, 0), e.event, e.from_state,
             e.to_state, v_actor, NULL, v_now
        FROM claim_grants_mem c
        STRAIGHT_JOIN (SELECT 1 AS n, 'CLAIMED' AS event, 'WAITING' AS from_state, 'LEASED' AS to_state
                       UNION ALL SELECT 2, 'STARTED', 'LEASED', 'RUNNING') e
       WHERE c.take = 1 AND (e.n = 1 OR p_start)
       ORDER BY c.attempt_id, e.n;
    ELSE
    IF v_take = 1 AND v_limited = 0 THEN
      -- One grant of an unkeyed task whose deadline is ahead, in a queue without a permit
      -- limit (a claim of one task, as every claim is below a worker's ceiling): attempt_grant's
      -- effects written here. Its frame, its second read of the task row (locked READY above)
      -- and of the queue, its checks for a key, a limit and a deadline, which the candidate's
      -- read answered, and two history_add frames were 51 of such a claim's 216 steps, 5 of
      -- its 31 SQL statements and 7-9% of its time. Anything else takes the loop below.
      single: BEGIN
        DECLARE v_number INT UNSIGNED;
        DECLARE v_expires DATETIME(6);
        DECLARE v_single_queue BIGINT UNSIGNED;
        DECLARE v_plain TINYINT DEFAULT 0;
        SELECT task_id, queue_id, attempt_number, expires_at, keyed = 0 AND late = 0
          INTO v_next, v_single_queue, v_number, v_expires, v_plain
          FROM claim_grants_mem ORDER BY priority, task_id LIMIT 1;
        IF v_plain THEN
          INSERT INTO attempts (public_id, task_id, namespace_id, application_id, queue_id,
                                session_id, attempt_number, concurrency_token, concurrency_slot,
                                state, lease_expires_at, created_at, started_at)
          SELECT new_public_id(), id, namespace_id, application_id, queue_id, v_session,
                 v_number, 0, 0, IF(p_start, 'RUNNING', 'LEASED'), v_expires, v_now,
                 IF(p_start, v_now, NULL)
            FROM tasks FORCE INDEX (PRIMARY) WHERE id = v_next;
          IF ROW_COUNT() <> 1 THEN
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INTERNAL: a claimed task was not found';
          END IF;
          SET v_first_attempt = LAST_INSERT_ID(), v_granted = 1;
          INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, created_at)
            VALUES (v_first_attempt, 'QUEUE', v_single_queue, NULL, v_expires, v_now);
          UPDATE tasks SET state = IF(p_start, 'RUNNING', 'LEASED'), lane = NULL,
                           attempts_used = v_number, current_attempt_id = v_first_attempt,
                           updated_at = v_now
           WHERE id = v_next;
          IF p_start THEN
            INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                      from_state, to_state, actor, details, created_at)
              VALUES (v_next, p_namespace_id, v_first_attempt, NULL, 'CLAIMED', 'WAITING',
                      'LEASED', v_actor, NULL, v_now),
                     (v_next, p_namespace_id, v_first_attempt, NULL, 'STARTED', 'LEASED',
                      'RUNNING', v_actor, NULL, v_now);
          ELSE
            INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                                      from_state, to_state, actor, details, created_at)
              VALUES (v_next, p_namespace_id, v_first_attempt, NULL, 'CLAIMED', 'WAITING',
                      'LEASED', v_actor, NULL, v_now);
          END IF;
        END IF;
      END single;
    END IF;
    IF v_granted = 0 THEN
    grants: BEGIN
      DECLARE v_done TINYINT DEFAULT 0;
      DECLARE v_size INT UNSIGNED;
      DECLARE c_grant CURSOR FOR SELECT task_id, payload_bytes FROM claim_grants_mem ORDER BY priority, task_id;
      DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
      SET v_bytes = 0;
      OPEN c_grant;
      grant_loop: LOOP
        IF v_granted >= v_cap THEN LEAVE grant_loop; END IF;
        IF v_app_max IS NOT NULL AND v_app_active + v_granted >= v_app_max THEN LEAVE grant_loop; END IF;
        -- Reset before each fetch: a no-data condition inside attempt_grant must not end the loop.
        SET v_done = 0;
        FETCH c_grant INTO v_next, v_size;
        IF v_done = 1 THEN LEAVE grant_loop; END IF;
        -- The payload budget (L1, above) holds for the grants made here too.
        IF v_granted > 0 AND v_bytes + v_size > c_payload_budget THEN LEAVE grant_loop; END IF;
        CALL attempt_grant(v_next, v_session, v_now, v_actor, p_limits, p_start, v_item);
        IF v_item IS NOT NULL THEN
          SET v_granted = v_granted + 1, v_bytes = v_bytes + v_size;
          IF v_first_attempt IS NULL THEN SET v_first_attempt = v_item; END IF;
        END IF;
      END LOOP;
      CLOSE c_grant;
    END grants;
    END IF;
    END IF;
    IF v_granted > 0 AND p_limits & 1 THEN
      UPDATE applications SET active_attempts = active_attempts + v_granted WHERE id = v_app;
    END IF;
  END IF;
  -- Seen now, with what it holds: one write of the session row, at the end (nothing in this
  -- transaction reads the session's own last_seen_at).
  UPDATE worker_sessions SET last_seen_at = v_now, in_flight = in_flight + v_granted WHERE id = v_session;
  SET p_first_attempt = v_first_attempt;
END
