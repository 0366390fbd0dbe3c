-- depends: 000023_key_rates
-- Parked candidates repaired. A claim that met a key's READY candidate after a policy had
-- lowered the key's limit below its holders parked the task but left it the key's candidate;
-- a release promotes only a key without a candidate, so the task and every task behind it on
-- the key waited for good (attempt_grant now clears the candidate when it parks it). Each such
-- task is made its key's READY candidate again where the key has room and the task could run
-- now (its queue ACTIVE, its backoff over); otherwise it stays parked, no longer the
-- candidate, and the key's next release, its queue's resume or the due sweep promotes it as
-- any parked task. Data only: one pass over the key rows that name a candidate.

UPDATE concurrency_resources r
  STRAIGHT_JOIN tasks t ON t.id = r.candidate_task_id
  STRAIGHT_JOIN queues q ON q.id = t.queue_id
   SET t.lane = 'READY', t.updated_at = UTC_TIMESTAMP(6)
 WHERE t.lane = 'BLOCKED' AND q.state = 'ACTIVE' AND t.available_at <= UTC_TIMESTAMP(6)
   AND (r.holder_attempt_id IS NOT NULL) + r.slot_holders < r.key_limit;

UPDATE concurrency_resources r
  STRAIGHT_JOIN tasks t ON t.id = r.candidate_task_id
   SET r.candidate_task_id = NULL
 WHERE t.lane = 'BLOCKED';
