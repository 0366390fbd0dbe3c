-- depends: 000009_task_list_indexes
-- Direct worker accounts (orbit-admin worker-account) and the namespaces each may act for.
-- Such an account may only EXECUTE the worker routines, which run with their definer's rights;
-- every one of them checks that the calling account is bound to the namespace it names (L4).

CREATE TABLE worker_accounts (
  account_user VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'MySQL user name of a direct worker account (the part of USER() before @)',
  namespace_id BIGINT UNSIGNED NOT NULL COMMENT 'A namespace the account may act for (namespaces.id)',
  created_at DATETIME(6) NOT NULL COMMENT 'When the binding was made (UTC)',
  PRIMARY KEY (account_user, namespace_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Namespaces each direct worker account is bound to; an account listed here acts for no other';
