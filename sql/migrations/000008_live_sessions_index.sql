-- depends: 000007_unkeyed_claim_index
-- The sessions of a namespace by when they were last seen. A claim splits a burst with the idle
-- sessions seen in the last 5 seconds that share one of its queues (W2); it found them through
-- the rows of every session ever registered on its queues, two rows read per session, and
-- each worker process registers a session of its own (5,000 gone sessions: 10,039 rows and
-- 9.2 ms a claim, in the claim's hold on the application row). Through this index it reads
-- the sessions seen in the last 5 seconds. The column's comment named start, renew and result
-- too, which never set it.

ALTER TABLE worker_sessions
  MODIFY COLUMN last_seen_at DATETIME(6) NOT NULL COMMENT 'Last hello, claim or goodbye, UTC',
  ADD KEY ix_worker_sessions_seen (namespace_id, last_seen_at);
