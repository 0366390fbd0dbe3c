"""A/B of routine variants on one server, in the same minutes (bench/README.md).

The installed routines are A. Each NAME=FILE installs FILE's routine beside it as NAME_b (B);
for a helper (worker_claim_grant, attempt_result_apply, ...) the calls of the cycle that call it
get B copies calling NAME_b.
Rounds of one thread's batch cycle (task_submit_many, worker_claim, attempt_start_many,
attempt_result_many of --batch tasks) alternate between A and B, each on a queue, a session
and a connection of its own (a connection keeps the temporary tables it made, so the two
never share one). Prints the median wall time of each call and the mariadbd CPU per call:

    python bench/ab.py --rounds 300 --batch 10 worker_claim=/tmp/worker_claim.sql

--result TEXT makes every result carry TEXT (a handler that returns something).

--key-turns K alternates hot-key turns instead (the phases part's, Bench.key_turns): each side's
session holds one running task of each of K keys, each key with a backlog, and a turn is one
worker_report_claim with start that reports them all and claims each key's next task:

    python bench/ab.py --rounds 500 --key-turns 5 worker_claim_grant=/tmp/grant.sql

Without ORBIT_MYSQL_DSN it uses the bench's private server (.scratch/bench-db) and installs
this tree's schema and routines there first.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measures  # noqa: E402
import run  # noqa: E402

from devtools import localdb
from orbit_shell.engine import db, schema
from orbit_shell.engine.db import Database

CALLS = ("task_submit_many", "worker_claim", "attempt_start_many", "attempt_result_many")
TURN = "worker_report_claim"  # the one call of a key turn (--key-turns)


def with_callers(variants: dict[str, Path]) -> dict[str, Path]:
    """A helper's variant (worker_claim_grant, attempt_result_apply, ...) reaches the cycle
    through B copies of the calls that call it, each calling the B of every helper given."""
    helpers = [n for n in variants if n not in (*CALLS, TURN)]
    out = dict(variants)
    for call in (*CALLS, TURN):
        if call in variants:
            continue  # its own variant is what B runs
        text = original = (schema.PROCEDURES_DIR / f"{call}.sql").read_text()
        for helper in helpers:
            # Named as installed: versioned_body versions only the routines it knows.
            b_name = schema.routine_name(f"{helper}_b")
            text = re.sub(rf"\bCALL {helper}\(", f"CALL {b_name}(", text)
        if text != original:
            rewritten = Path(f"/tmp/ab-{call}-calls-b.sql")
            rewritten.write_text(text)
            out[call] = rewritten
    return out


def install_b(dsn: str, variants: dict[str, Path]) -> None:
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            # Helpers first: a routine's CREATE does not need its callees, but its B callers
            # are looked up by their versioned names when they run.
            for name, path in variants.items():
                # Installed as the routine NAME_b of this tree's version (schema.py), its calls
                # of the other routines versioned as A's are.
                text = path.read_text()
                kind = re.search(r"CREATE (PROCEDURE|FUNCTION)", text).group(1)
                body = schema.versioned_body(schema.Routine(name, kind, text))
                b_name = schema.routine_name(f"{name}_b")
                sql, n = re.subn(
                    rf"CREATE {kind} {schema.routine_name(name)}\(",
                    f"CREATE {kind} {b_name}(",
                    body,
                )
                if n != 1:
                    raise SystemExit(f"{path} does not create {name}")
                cur.execute(f"DROP {kind} IF EXISTS {b_name}")
                cur.execute(sql)
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument(
        "--result", default="", help="the text each result carries (default: none, a no-op's)"
    )
    parser.add_argument(
        "--key-turns", type=int, default=0, metavar="K", help="alternate key turns of K keys"
    )
    parser.add_argument("variants", nargs="+", metavar="NAME=FILE")
    args = parser.parse_args()
    variants = {}
    for item in args.variants:
        name, _, path = item.partition("=")
        if not path or not (schema.PROCEDURES_DIR / f"{name}.sql").exists():
            parser.error(f"{item}: NAME must be a routine of sql/procedures")
        variants[name] = Path(path)
    variants = with_callers(variants)
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not dsn:
        server = localdb.PrivateServer(
            run.ROOT / ".scratch" / "bench-db", localdb.ensure_binaries()
        )
        dsn = server.start()
        schema.apply(dsn)
    install_b(dsn, variants)
    bench = run.Bench(dsn)
    calls = (TURN,) if args.key_turns else CALLS

    def name(call: str, side: str) -> str:
        return call + "_b" if side == "B" and call in variants else call

    sides, turns = {}, {}
    for side in "AB":
        d = Database(dsn, pool_size=1)
        if args.key_turns:  # the warm-up's turns and the counted ones
            turns[side] = bench.key_turn(d, args.key_turns, args.rounds + 10, name(TURN, side))
        else:
            queue, session = bench.batch_queue(d, f"ab-{side}-{secrets.token_hex(3)}", args.batch)
            sides[side] = (d, queue, session)
    pids = measures.mariadbd_pids()
    wall = {s: {c: [] for c in calls} for s in "AB"}
    cpu = {s: dict.fromkeys(calls, 0.0) for s in "AB"}

    def cycle(side: str, keep: bool) -> None:
        def timed(call: str, *call_args):
            c0, t0 = measures.db_cpu_seconds(pids), time.perf_counter()
            out = turns[side]() if args.key_turns else d.call(name(call, side), *call_args)
            if keep:
                wall[side][call].append(time.perf_counter() - t0)
                cpu[side][call] += measures.db_cpu_seconds(pids) - c0
            return out

        if args.key_turns:
            claimed, wanted = timed(TURN), args.key_turns
        else:
            d, queue, session = sides[side]
            claimed = len(bench.batch_cycle(timed, queue, session, args.batch, args.result))
            wanted = args.batch
        if claimed != wanted:
            raise SystemExit(f"{side}: claimed {claimed} of {wanted}")

    for _ in range(10):  # warm both sides' caches, uncounted
        cycle("A", False)
        cycle("B", False)
    for i in range(args.rounds):
        for side in "AB" if i % 2 == 0 else "BA":
            cycle(side, True)
    total = dict.fromkeys("AB", 0.0)
    for call in calls:
        a, b = (statistics.median(wall[s][call]) * 1000 for s in "AB")
        total["A"] += a
        total["B"] += b
        ca, cb = (cpu[s][call] / args.rounds * 1000 for s in "AB")
        print(
            f"{call:20s} median A {a:7.3f} ms  B {b:7.3f} ms  ({b / a:.3f}x)  "
            f"mariadbd CPU A {ca:6.3f} B {cb:6.3f} ms"
        )
    if len(calls) > 1:
        print(
            f"{'cycle':20s} median A {total['A']:7.3f} ms  B {total['B']:7.3f} ms  "
            f"({total['B'] / total['A']:.3f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
