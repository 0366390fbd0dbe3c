"""What a procedure's structure costs by itself: mariadbd's CPU per iteration of a loop inside
one procedure that CALLs an empty helper (without and with six parameters, as Orbit's helpers
take), makes and empties a MEMORY temporary table the way the batch paths do, or reads one row
by primary key, against the bare loop; and the empty helper CALLed by the client, a round trip
each. Not Orbit's routines: a scratch database of their own
(``bench/floor.py``'s), one connection, 100,000 iterations each (5,000 client CALLs), so that
what runs besides them in mariadbd is a small part of each figure.
"""

from __future__ import annotations

from typing import Any

import floor
from measures import db_cpu_seconds, mariadbd_pids

from orbit_shell.engine import db

CLIENT_CALLS = 5_000

BODIES = {
    "loop": "SET v = v + 1;",
    "helper_call": "CALL {f}.noop();",
    "helper_call_6_params": "CALL {f}.noop6(v, v, 'abcdef', 1, 1, w);",
    "temporary_table": "CALL {f}.scratch_table();",
    "primary_key_read": "SELECT n INTO w FROM {f}.one WHERE id = 1;",
}

DDL = (
    "CREATE TABLE {f}.one (id INT PRIMARY KEY, n BIGINT UNSIGNED NOT NULL)"
    " ENGINE=InnoDB COMMENT='overheads: one row to read'",
    "INSERT INTO {f}.one VALUES (1, 0)",
    "CREATE PROCEDURE {f}.noop() BEGIN END",
    """CREATE PROCEDURE {f}.noop6(IN a BIGINT UNSIGNED, IN b BIGINT UNSIGNED, IN c CHAR(32),
                                  IN d INT, IN e TINYINT, OUT o BIGINT UNSIGNED)
    BEGIN SET o = a; END""",
    # As worker_claim_tables: made once per connection, emptied at every call.
    """CREATE PROCEDURE {f}.scratch_table()
    BEGIN
      CREATE TEMPORARY TABLE IF NOT EXISTS scratch_mem (
        task_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, priority TINYINT UNSIGNED NOT NULL,
        take TINYINT NOT NULL) ENGINE=MEMORY;
      DELETE FROM scratch_mem;
    END""",
    *(
        f"""CREATE PROCEDURE {{f}}.loop_{name}(IN p INT)
        BEGIN
          DECLARE v INT DEFAULT 0;
          DECLARE w BIGINT UNSIGNED;
          WHILE v < p DO {body} SET v = v + 1; END WHILE;
        END"""
        for name, body in BODIES.items()
    ),
)


def run(dsn: str, iterations: int = 100_000) -> dict[str, Any]:
    """Microseconds of mariadbd CPU per iteration of each loop, the bare loop's included."""
    scratch = floor.install(dsn, DDL)
    conn = db.connect(dsn)
    pids = mariadbd_pids()
    out: dict[str, float] = {}
    try:
        with conn.cursor() as cur:
            for name in BODIES:
                c0 = db_cpu_seconds(pids)
                cur.execute(f"CALL `{scratch}`.loop_{name}({iterations})")
                out[name] = 1e6 * (db_cpu_seconds(pids) - c0) / iterations
            # The same empty helper called by the client: a round trip, a CALL to parse.
            c0 = db_cpu_seconds(pids)
            for _ in range(CLIENT_CALLS):
                cur.execute(f"CALL `{scratch}`.noop()")
            out["client_call"] = 1e6 * (db_cpu_seconds(pids) - c0) / CLIENT_CALLS
    finally:
        conn.close()
    floor.drop(dsn, scratch)
    return {"cpu_us_per_iteration": out}
