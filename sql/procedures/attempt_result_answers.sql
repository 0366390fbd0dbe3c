-- attempt_result_answers: the answer of attempt_result_apply, read after the commit. Result
-- set, one row per item in order: seq, item_error ('CODE: message' or NULL), attempt_id,
-- task_id, duplicate. The group's rows come from result_group_mem, the others from p_out.
CREATE PROCEDURE attempt_result_answers(IN p_out MEDIUMTEXT)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  IF p_out = '[]' THEN
    -- Every item went with the group, the common case: its rows alone, without the union's
    -- derived table (about a third of this answer's time, profiled).
    SELECT f.seq, NULL AS item_error, a.public_id AS attempt_id, t.public_id AS task_id,
           0 AS duplicate
      FROM result_group_mem f STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = f.attempt_id
      STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
     ORDER BY f.seq;
  ELSE
    SELECT x.seq, x.item_error, x.attempt_id, x.task_id, x.duplicate
      FROM (SELECT f.seq, NULL AS item_error, a.public_id AS attempt_id, t.public_id AS task_id,
                   0 AS duplicate
              FROM result_group_mem f STRAIGHT_JOIN attempts a FORCE INDEX (PRIMARY) ON a.id = f.attempt_id
              STRAIGHT_JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = f.task_id
            UNION ALL
            SELECT j.seq, NULLIF(j.error, ''), j.attempt_id, t.public_id, j.duplicate
              FROM JSON_TABLE(p_out, '$[*]' COLUMNS (seq INT PATH '$.seq',
                                                     attempt_id CHAR(32) PATH '$.attempt_id',
                                                     task BIGINT UNSIGNED PATH '$.task',
                                                     duplicate TINYINT PATH '$.duplicate',
                                                     error VARCHAR(512) PATH '$.error')) j
              LEFT JOIN tasks t FORCE INDEX (PRIMARY) ON t.id = j.task) x
     ORDER BY x.seq;
  END IF;
END
