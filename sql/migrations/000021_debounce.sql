-- depends: 000020_replaced_by
-- Debounced submissions (P5): when the burst a task continues began, so that its last task
-- runs no later than the burst's longest wait after it. A column added at the end of the
-- table, in place.

ALTER TABLE tasks
  ADD COLUMN burst_started_at DATETIME(6) NULL DEFAULT NULL
    COMMENT 'A debounced task: when the burst of submissions it continues began (its first, or the earliest a replaced task carried), UTC; NULL otherwise';
