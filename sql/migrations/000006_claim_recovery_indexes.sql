-- depends: 000005_keyed_concurrency
-- Per-queue indexes for the recovery a claim runs on its own queues (expired leases, backoff
-- that ran out). Without them those loops range over every queue's expired attempts and due
-- tasks, which grow whenever no sweeper runs (for example direct MySQL workers without an
-- `orbit` server), and a claim would pay for other queues' backlog.

ALTER TABLE attempts ADD KEY ix_attempts_queue_lease (queue_id, state, lease_expires_at);

ALTER TABLE tasks ADD KEY ix_tasks_queue_due (queue_id, lane, available_at);
