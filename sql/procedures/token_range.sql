-- token_range: the tokens this primary may grant now (H1): from its epoch's first token to its
-- last. Epoch e grants tokens in [e << 40, (e << 40) + 2^40 - 1]; the last epoch (2^24 - 1)
-- ends at 18446744073709551615, the unsigned 64-bit maximum (K7).
-- Helper inside the caller's transaction (attempt_grant, worker_claim_grant). A plain read
-- (SELECT ... INTO): no lock on the epoch row, which only a promotion changes, before the new
-- primary takes its first write.
CREATE PROCEDURE token_range(OUT p_floor BIGINT UNSIGNED, OUT p_ceiling BIGINT UNSIGNED)
  READS SQL DATA SQL SECURITY DEFINER
BEGIN
  DECLARE v_epoch BIGINT UNSIGNED DEFAULT 0;
  SELECT epoch INTO v_epoch FROM token_epoch WHERE id = 1;
  SET p_floor = v_epoch << 40, p_ceiling = (v_epoch << 40) | 1099511627775;
END
