-- batch_items_read: every item of a batch (a JSON array) as its own JSON text, into batch_items
-- by position (seq from 0), when the caller's item loop would read enough of a long enough
-- batch to be worth it; with each item's result and error texts as attempt_result_apply's loop
-- reads them (NULL for a batch of submissions, whose items have neither). Helper inside the
-- caller's transaction. The table is made here, when it is filled, rather than before the
-- transaction as the group tables are: CREATE TEMPORARY TABLE commits nothing (MariaDB, and
-- MySQL 8 with the row-based binary log Orbit requires), and made before every batch call it
-- cost 30-60 µs a call, most of which never fill it. InnoDB: the in-memory engine holds no
-- TEXT. Named anew whenever its columns change (a connection keeps the table it made).
-- Params: the batch; how many of its items the caller's loop reads. Out: 1 when the items are
--   in batch_items (read them from there by seq), 0 when the loop reads them from the batch.
-- A batch procedure's item loop reads an item with JSON_EXTRACT(items, '$[i]'), and MariaDB
-- keeps JSON as text, so each such read scans the batch from its start: n reads cost about
-- n x the batch's length / 2 (a batch of submissions sent again, each item then a replay, or
-- many results with texts). One statement here reads them all; it costs about 0.1 ms, which
-- the scans pass once the reads x the batch's bytes pass 16 KiB (sql/README.md, "Many items are
-- read out of a batch once"). JSON_TABLE gives each item's text, and each JSON value, as
-- JSON_EXTRACT does.
CREATE PROCEDURE batch_items_read(IN p_items MEDIUMTEXT, IN p_reads INT, OUT p_read TINYINT)
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  SET p_read = p_reads > 1 AND p_reads * LENGTH(p_items) > 16384;
  IF p_read THEN
    CREATE TEMPORARY TABLE IF NOT EXISTS batch_items (
      seq INT NOT NULL PRIMARY KEY,
      item MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
      result MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
      error MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL
    ) ENGINE=InnoDB;
    DELETE FROM batch_items;
    INSERT INTO batch_items (seq, item, result, error)
    SELECT j.seq - 1, j.item,
           IF(JSON_TYPE(j.result) = 'NULL', NULL, NULLIF(JSON_UNQUOTE(j.result), '')),
           IF(JSON_TYPE(j.error) = 'NULL', NULL, NULLIF(JSON_UNQUOTE(j.error), ''))
      FROM JSON_TABLE(p_items, '$[*]' COLUMNS (seq FOR ORDINALITY, item JSON PATH '$',
                                               result JSON PATH '$.result',
                                               error JSON PATH '$.error')) j;
  END IF;
END
