-- key_policy_limit(namespace, key): the limit the namespace's key policies give the key (P1):
-- its exact rule, else its longest matching prefix rule, else 1. Read when a key row is made
-- and when a policy changes (both keep concurrency_resources.key_limit), never by a claim.
-- Reads the namespace's rules by uq_key_policies_rule: the exact rule by key, the prefixes
-- (at most 1,000 rules a namespace, key_policy_write) by the namespace's PREFIX range.
CREATE FUNCTION key_policy_limit(p_namespace_id BIGINT UNSIGNED,
                                 p_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
  RETURNS SMALLINT UNSIGNED
  NOT DETERMINISTIC READS SQL DATA SQL SECURITY DEFINER
  RETURN COALESCE(
    (SELECT key_limit FROM key_policies
      WHERE namespace_id = p_namespace_id AND match_kind = 'KEY' AND pattern = p_key),
    (SELECT key_limit FROM key_policies
      WHERE namespace_id = p_namespace_id AND match_kind = 'PREFIX'
        AND LEFT(p_key, CHAR_LENGTH(pattern)) = pattern
      ORDER BY CHAR_LENGTH(pattern) DESC LIMIT 1),
    1)
