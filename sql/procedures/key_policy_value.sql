-- key_policy_value(namespace, key, field): what the namespace's key policies give the key
-- (P1, P6): 'limit', 'permits' or 'seconds' of its exact rule, else of its longest matching
-- prefix rule; NULL without one (limit 1, no rate). Read when a key row is made and when a
-- policy changes (both keep the key row's copy), never by a claim. Reads the namespace's rules
-- (at most 1,000, key_policy_write) through uq_key_policies_rule.
CREATE FUNCTION key_policy_value(p_namespace_id BIGINT UNSIGNED,
                                 p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
                                 p_field VARCHAR(8))
  RETURNS INT UNSIGNED
  NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
  RETURN (SELECT CASE p_field WHEN 'limit' THEN key_limit WHEN 'permits' THEN rate_permits
                              ELSE rate_seconds END
            FROM key_policies
           WHERE namespace_id = p_namespace_id
             AND ((match_kind = 'KEY' AND pattern = p_key)
                  OR (match_kind = 'PREFIX' AND LEFT(p_key, CHAR_LENGTH(pattern)) = pattern))
           ORDER BY match_kind = 'KEY' DESC, CHAR_LENGTH(pattern) DESC LIMIT 1)
