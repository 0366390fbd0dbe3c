-- depends: 000024_parked_candidates
-- Grants without an attempt repaired. Beside single submissions, a claim could (rarely) take
-- a task whose submission had not committed yet, and its grant, reading the task plainly,
-- wrote no attempt for it: the task was left LEASED or RUNNING with no attempt of its own (its
-- current attempt 0, or the id of another row), never to run or be recovered, and a keyed
-- one's key held by attempt 0 (worker_claim_grant now grants only what a plain read sees;
-- sql/README.md, "Locking reads"). Each such task goes back to its queue as a lease that
-- expired before its start would leave it: WAITING, its attempts counted again, with a
-- history row; unkeyed READY, keyed parked and then its key's READY candidate where the key
-- has room and none. Key rows and slots held by attempt 0 are freed, and permits of no
-- attempt deleted. Data only; the tasks are read through ix_tasks_ns_state, the running ones
-- of each namespace.

CREATE TEMPORARY TABLE unattempted (
  task_id BIGINT UNSIGNED NOT NULL PRIMARY KEY COMMENT 'tasks.id of a grant without an attempt',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'Its namespace (namespaces.id)',
  state VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'Its state: LEASED or RUNNING'
) ENGINE=MEMORY COMMENT='The tasks this migration puts back in their queues';

INSERT INTO unattempted (task_id, namespace_id, state)
SELECT t.id, t.namespace_id, t.state
  FROM namespaces n
  STRAIGHT_JOIN tasks t FORCE INDEX (ix_tasks_ns_state)
    ON t.namespace_id = n.id AND t.state IN ('LEASED', 'RUNNING')
 WHERE NOT EXISTS (SELECT 1 FROM attempts a
                    WHERE a.id = t.current_attempt_id AND a.task_id = t.id);

INSERT INTO task_history (task_id, namespace_id, attempt_id, concurrency_token, event,
                          from_state, to_state, actor, details, created_at)
SELECT task_id, namespace_id, NULL, NULL, 'REQUEUED', state, 'WAITING', 'system:upgrade',
       'granted without an attempt: back in its queue', UTC_TIMESTAMP(6)
  FROM unattempted ORDER BY task_id;

UPDATE unattempted u STRAIGHT_JOIN tasks t ON t.id = u.task_id
   SET t.state = 'WAITING', t.lane = IF(t.concurrency_key = '', 'READY', 'BLOCKED'),
       t.attempts_used = (SELECT COUNT(*) FROM attempts a WHERE a.task_id = t.id),
       t.current_attempt_id = (SELECT MAX(a.id) FROM attempts a WHERE a.task_id = t.id),
       t.updated_at = UTC_TIMESTAMP(6);

-- A keyed grant's key: its holder, or its slot (P2), was attempt 0.
UPDATE concurrency_resources
   SET holder_attempt_id = NULL, version = version + 1, updated_at = UTC_TIMESTAMP(6)
 WHERE holder_attempt_id = 0;

UPDATE concurrency_resources r
  JOIN (SELECT resource_id, COUNT(*) AS n FROM key_slots WHERE attempt_id = 0
         GROUP BY resource_id) s ON s.resource_id = r.id
   SET r.slot_holders = r.slot_holders - s.n, r.version = r.version + 1,
       r.updated_at = UTC_TIMESTAMP(6);

UPDATE key_slots SET attempt_id = NULL, updated_at = UTC_TIMESTAMP(6) WHERE attempt_id = 0;

-- A parked one is its key's READY candidate where the key has room and none (a release
-- promotes only a key without one; the grant had cleared it), as 000024 does.
UPDATE unattempted u
  STRAIGHT_JOIN tasks t ON t.id = u.task_id AND t.lane = 'BLOCKED'
  STRAIGHT_JOIN concurrency_resources r
    ON r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key
  STRAIGHT_JOIN queues q ON q.id = t.queue_id
   SET t.lane = 'READY', t.updated_at = UTC_TIMESTAMP(6), r.candidate_task_id = t.id
 WHERE r.candidate_task_id IS NULL AND q.state = 'ACTIVE' AND t.available_at <= UTC_TIMESTAMP(6)
   AND (r.holder_attempt_id IS NOT NULL) + r.slot_holders < r.key_limit;

DELETE p FROM permits p LEFT JOIN attempts a ON a.id = p.attempt_id WHERE a.id IS NULL;

DROP TEMPORARY TABLE unattempted;
