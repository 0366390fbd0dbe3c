-- depends: 000010_worker_accounts
-- Keys by how long tasks have waited for them (GET /v1/keys, V1). Finding the contended keys
-- from the parked tasks would read a hot key's whole backlog before the next key; the key row
-- records instead since when its tasks have waited without a break, and an index orders a
-- namespace's keys by it. Set when a task parks on a key that had none waiting; cleared when
-- a release or a candidate's leaving finds no parked task to promote.

ALTER TABLE concurrency_resources
  ADD COLUMN waiting_since DATETIME(6) NULL COMMENT 'Since when tasks have waited for this key without a break (UTC); NULL = none waits' AFTER candidate_task_id,
  ADD KEY ix_concurrency_resources_waiting (namespace_id, waiting_since);

UPDATE concurrency_resources r
   SET r.waiting_since = (SELECT MIN(t.created_at) FROM tasks t
                           WHERE t.namespace_id = r.namespace_id
                             AND t.concurrency_key = r.concurrency_key AND t.lane = 'BLOCKED');
