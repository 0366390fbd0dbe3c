-- replace_queues: the queues an if_busy 'replace' submission may count in, as queues_lock takes
-- them: its own and those of the waiting tasks of its key and handler (the tasks it may
-- replace), read plainly. Helper for the submission procedures, which lock the limited ones
-- (queues_lock) before any key row, as the lock order asks; a task that joins the key from
-- another limited queue between this read and the key's lock makes the submission retry
-- (task_submit_one).
-- Out: a JSON array of {queue}; the submission's queue alone when it replaces nothing.
CREATE PROCEDURE replace_queues(IN p_namespace_id BIGINT UNSIGNED, IN p_queue_id BIGINT UNSIGNED,
                                IN p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                                IN p_handler VARCHAR(200), OUT p_queues MEDIUMTEXT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  SELECT JSON_ARRAYAGG(JSON_OBJECT('queue', x.queue_id)) INTO p_queues
    FROM (SELECT p_queue_id AS queue_id
          UNION
          SELECT t.queue_id FROM tasks t FORCE INDEX (ix_tasks_key_lane)
           WHERE t.namespace_id = p_namespace_id AND t.concurrency_key = p_key
             AND t.lane IS NOT NULL AND t.handler = p_handler) x;
END
