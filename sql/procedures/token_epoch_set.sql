-- token_epoch_set: set this database's token epoch (H1). Called by orbit-admin promote on the
-- promoted server before it takes writes, with an epoch above every epoch in use; the tests
-- use it to reach the last epoch (K7). One transaction.
-- Params: the epoch (0 to 2^24 - 1), what sets it.
-- Errors: INVALID_ARGUMENT (epoch out of range).
-- Locks: the token_epoch row.
CREATE PROCEDURE token_epoch_set(IN p_epoch INT UNSIGNED, IN p_note VARCHAR(255))
  MODIFIES SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
  IF p_epoch IS NULL OR p_epoch > 16777215 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'INVALID_ARGUMENT: epoch must be 0 to 16777215';
  END IF;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  UPDATE token_epoch SET epoch = p_epoch, advanced_at = UTC_TIMESTAMP(6), note = p_note
   WHERE id = 1;
  COMMIT;
END
