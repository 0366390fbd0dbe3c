-- depends: 000014_permits_by_attempt
-- Permits keep one index. 000014 made (attempt_id, kind) the primary key and left
-- uq_permits_attempt, the same columns, for the FORCE INDEX of the routines installed before
-- it; no routine installed since names it, so every permit a claim inserts and every one a
-- release deletes was maintained twice for nothing. On a hot key's turn (a result that frees
-- the key and the claim that grants it again: two permits deleted, two inserted, per task)
-- the second index cost 3-6% of the turn's mariadbd CPU (bench/README.md).
-- The routines of the version before 000014 stop working against this table; a rolling
-- upgrade from one runs 000014's version first.

ALTER TABLE permits DROP INDEX uq_permits_attempt;
