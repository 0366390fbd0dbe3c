-- depends: 000011_key_waits
-- Tokens that never go back across a failover (H1). A token is 64 bits: the high 24 are the
-- epoch of the server that granted it, the low 40 count within the epoch. Promoting a replica
-- advances the epoch before its first write, so its first grant on any key starts above every
-- token an earlier primary could have granted, even ones the replica never received. A key
-- whose count reaches the end of its epoch's range is refused like an exhausted key (K7)
-- until the next epoch. Epoch 0 is a database that was never promoted.

CREATE TABLE token_epoch (
  id TINYINT UNSIGNED NOT NULL COMMENT 'Always 1: one row',
  epoch INT UNSIGNED NOT NULL COMMENT 'Epoch of this primary: tokens granted now lie in [epoch << 40, (epoch + 1) << 40); only orbit-admin promote advances it',
  advanced_at DATETIME(6) NULL COMMENT 'When the epoch was last advanced (UTC); NULL = never',
  note VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'What advanced it (the promote command says from which server)',
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='The token epoch of this database (H1); replicated with everything else';

INSERT INTO token_epoch (id, epoch) VALUES (1, 0);
