-- depends: 000006_claim_recovery_indexes
-- The READY rows of a queue by key. A session without concurrency_keys claims only unkeyed tasks
-- (W2); through ix_tasks_claim (queue_id, lane, priority, id) its claim and its long-poll probe
-- read every READY keyed row ahead of the first unkeyed one, 50k rows and 62 ms a claim with
-- 50k keys waiting, inside the claim's hold on the application row. Here the unkeyed rows are
-- one range (concurrency_key = '') in claim order, and the keyed ones another, which pausing a
-- queue walks without reading its unkeyed backlog.

ALTER TABLE tasks ADD KEY ix_tasks_queue_lane_key (queue_id, lane, concurrency_key, priority, id);
