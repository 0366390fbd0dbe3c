"""Where a hot key's turn spends its time, statement by statement (bench/README.md, open
question 6).

A private MariaDB of its own (``.scratch/bench-db-statements``, performance_schema on, empty at
each run), one thread, the phases part's key turns: Orbit's (``Bench.key_turn``) and, with
``--floor``, the SPEC floor's (``bench/spec_floor_keys.py``). Over ``--turns`` turns the
server's statement history records every statement, top level and inside the routines; the
run prints, per turn, each statement's wall time (the instrumentation's own cost included, so
compare rows and runs of this tool, not its totals with the phases part), how many times it
ran and the rows it examined, largest first. A CALL inside a routine counts what it calls.

    python bench/statements.py --key-turns 5 --floor
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

import spec_floor_keys  # noqa: E402
from engine_parts import Bench  # noqa: E402

from devtools import localdb  # noqa: E402
from orbit_shell.engine import db, schema  # noqa: E402
from orbit_shell.engine.db import Database  # noqa: E402

HISTORY = 200_000  # statements kept: Orbit's turn runs about 270, its SETs and jumps included


def server() -> localdb.PrivateServer:
    """The tool's own server, empty: performance_schema is set at start-up, and the bench's
    server runs without it (the instrumentation costs every statement a little)."""
    own = localdb.PrivateServer(
        ROOT / ".scratch" / "bench-db-statements",
        localdb.ensure_binaries(),
        options=(
            "--performance-schema=ON",
            "--performance-schema-consumer-events-statements-history-long=ON",
            f"--performance-schema-events-statements-history-long-size={HISTORY}",
        ),
    )
    if own.running():
        own.stop()
    shutil.rmtree(own.datadir, ignore_errors=True)
    return own


def profile(dsn: str, turn, turns: int, top: int) -> list[str]:
    """``turns`` calls of ``turn()`` after ten unrecorded ones, then the recorded statements
    grouped by their text (digits and quoted values left as they are: one routine's
    statements repeat verbatim), as printable lines. The bookkeeping runs on a connection
    of its own, whose statements are left out."""
    for _ in range(10):
        turn()
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:

            def query(sql: str) -> list[dict]:
                cur.execute(sql)
                return list(cur.fetchall())

            [me] = query(
                "SELECT THREAD_ID AS id FROM performance_schema.threads"
                " WHERE PROCESSLIST_ID = CONNECTION_ID()"
            )
            query("TRUNCATE performance_schema.events_statements_history_long")
            query(
                "UPDATE performance_schema.setup_consumers SET ENABLED = 'YES'"
                " WHERE NAME IN ('events_statements_current', 'events_statements_history_long')"
            )
            for _ in range(turns):
                turn()
            query(
                "UPDATE performance_schema.setup_consumers SET ENABLED = 'NO'"
                " WHERE NAME = 'events_statements_history_long'"
            )
            others = f"THREAD_ID <> {int(me['id'])}"
            rows = query(
                "SELECT EVENT_NAME AS kind,"
                " LEFT(REGEXP_REPLACE(COALESCE(SQL_TEXT, ''), '[[:space:]]+', ' '), 100) AS text,"
                " COUNT(*) AS n, SUM(TIMER_WAIT) / 1e6 AS us, SUM(ROWS_EXAMINED) AS examined"
                " FROM performance_schema.events_statements_history_long"
                # The client's own CALL is the turn as a whole, printed apart.
                f" WHERE {others} AND EVENT_NAME <> 'statement/sql/call_procedure'"
                " GROUP BY kind, text ORDER BY us DESC"
            )
            [whole] = query(
                "SELECT COUNT(*) AS n, SUM(TIMER_WAIT) / 1e6 AS us"
                " FROM performance_schema.events_statements_history_long"
                f" WHERE {others} AND EVENT_NAME = 'statement/sql/call_procedure'"
            )
    finally:
        conn.close()
    if int(whole["n"]) != turns:
        raise RuntimeError(
            f"the history kept {whole['n']} of {turns} turns; raise HISTORY or lower --turns"
        )
    inner = sum(int(r["n"]) for r in rows) / turns
    lines = [f"  a turn: {float(whole['us']) / turns:,.0f} us, {inner:.0f} statements inside"]
    for r in rows[:top]:
        kind = r["kind"].rsplit("/", 1)[-1]
        lines.append(
            f"  {float(r['us']) / turns:8.1f} us {int(r['n']) / turns:5.1f}x"
            f" rows {int(r['examined'] or 0) / turns:6.1f}  {kind:12s} {r['text'] or ''}"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--key-turns", type=int, default=5, help="keys a turn reports and claims")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--top", type=int, default=40, help="statements printed")
    parser.add_argument("--floor", action="store_true", help="the SPEC floor's turn too")
    args = parser.parse_args()
    own = server()
    dsn = own.start()
    try:
        schema.apply(dsn)
        bench = Bench(dsn)
        d = Database(dsn, pool_size=1)
        try:
            turn = bench.key_turn(d, args.key_turns, args.turns + 10)
            print(f"Orbit, turns of {args.key_turns} keys (worker_report_claim with start):")
            print("\n".join(profile(dsn, turn, args.turns, args.top)), flush=True)
        finally:
            d.close()
        if args.floor:
            turn, close = spec_floor_keys.key_turn(dsn, args.key_turns, args.turns + 10)
            try:
                print(f"the SPEC floor, turns of {args.key_turns} keys (spec_key_turn):")
                print("\n".join(profile(dsn, turn, args.turns, args.top)), flush=True)
            finally:
                close()
    finally:
        own.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
