-- depends: 000008_live_sessions_index
-- Task lists (GET /v1/tasks) page a namespace's tasks in id order, optionally filtered by
-- queue, state, business key or concurrency key; every filter but the concurrency key had an
-- index (namespace_id, column, id). Without a filter, or with the concurrency key, the page was
-- read along the primary key from the cursor on, through every other namespace's tasks: a
-- namespace's last page read 110,534 rows (29 ms) of a 160,500-task table to find 33.

ALTER TABLE tasks
  ADD KEY ix_tasks_ns (namespace_id, id),
  ADD KEY ix_tasks_ns_key (namespace_id, concurrency_key, id);
