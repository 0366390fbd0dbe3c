"""The policies part: what the busy-key choices and rates cost (P5, P6).

A debounce burst: 8 producer threads send ``BURST`` single submissions on one key, each with
``"debounce": {"delay_ms": 200, "max_wait_ms": 2000}``, while an SDK worker process serves the
queue; then the same submissions without the debounce (each parked behind the key, K4) on
another key. Printed: the submissions accepted per second each way, the tasks of the burst
that ran (a debounce should run a handful: one per max_wait while the burst lasts, and the
last), and InnoDB's deadlocks meanwhile.

Rates: claims of one task of a free key each (the procedures, as the blocked part times
them) on a queue where 100 keys of a rate of 1 permit an hour each have a backlog of
``RATED_BACKLOG`` (each key's next task waiting DELAYED for its rate, the rest parked behind
it), and on a queue without them, one claim on each in turn, ``SAMPLES`` each. Printed: claim
p99 with the rated keys against without (target <= 1.2x), rows read per claim, deadlocks.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import time
from pathlib import Path

from e2e import noop_worker
from engine_parts import Bench
from measures import lock_counters, lock_delta, park, pct, run_threads

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest

ROOT = Path(__file__).resolve().parent.parent
BURST = 2000
PRODUCERS = 8
DEBOUNCE = {"delay_ms": 200, "max_wait_ms": 2000}
RATED_KEYS = 100
RATED_BACKLOG = 100
SAMPLES = 1500


def _claim_one(bench: Bench, d: Database, conn, sid: str, queue: int, name: str) -> tuple:
    bench.submit(d, name, name + "-free", queue)
    ms, read, rows = bench.timed_claim(conn, d, sid)
    assert rows, "a claimable task was hidden"
    return ms, read


def rated_keys(bench: Bench) -> dict:
    """Claim p99 of free keys on a queue where 100 rate-limited keys hold backlogs, against a
    queue without them, one claim on each in turn (the machine's noise falls on both)."""
    tag = "rate-" + secrets.token_hex(3)
    d = Database(bench.dsn, pool_size=2)
    conn = db.connect(bench.dsn)
    plain, plain_sid = bench.batch_queue(d, tag + "-plain", 1)
    queue, sid = bench.batch_queue(d, tag, 1)
    [public] = d.query("SELECT public_id FROM queues WHERE id = %s", (queue,))
    locks = lock_counters(bench.db)
    d.call("key_policy_write", bench.ns, None, "PREFIX", f"{tag}/", 1, 1, 3600, 0)
    rated = bench.hello(d, tag + "-rated", capacity=RATED_KEYS, queue_public=public["public_id"])
    for k in range(RATED_KEYS):
        for n in range(2):
            bench.submit(d, f"{tag}/{k}-{n}", f"{tag}/{k}", queue)
    # Each key's first permit uses its hour's rate; its second task then waits DELAYED. Claims
    # until none is left: a claim takes a fair share while the claimer is idle (W2).
    while True:
        [rows] = d.call("worker_claim", bench.ns, rated, RATED_KEYS, 0)[:1]
        if not rows:
            break
        for row in rows:
            d.call("attempt_start", bench.ns, rated, row["attempt_id"])
            d.call("attempt_result", bench.ns, rated, row["attempt_id"], "succeeded", 0, None, None)
    for k in range(RATED_KEYS):
        park(bench.dsn, bench.ns, bench.app, queue, f"{tag}/{k}", RATED_BACKLOG)
    [waiting] = d.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE queue_id = %s AND lane = 'DELAYED'", (queue,)
    )
    before, during, before_reads, during_reads = [], [], [], []
    for i in range(SAMPLES):
        ms, read = _claim_one(bench, d, conn, plain_sid, plain, f"{tag}-a-{i}")
        before.append(ms)
        before_reads.append(read)
        ms, read = _claim_one(bench, d, conn, sid, queue, f"{tag}-b-{i}")
        during.append(ms)
        during_reads.append(read)
    deadlocks = lock_delta(locks, lock_counters(bench.db))["deadlocks"]
    conn.close()
    d.close()
    out = {
        "rated_keys": RATED_KEYS,
        "waiting_for_rate": waiting["n"],
        "parked": RATED_KEYS * RATED_BACKLOG,
        "claim_p99_ms_without": pct(before, 99),
        "claim_p99_ms_with": pct(during, 99),
        "rows_read_without": sorted(before_reads)[len(before_reads) // 2],
        "rows_read_with": sorted(during_reads)[len(during_reads) // 2],
        "deadlocks": deadlocks,
    }
    out["ratio"] = out["claim_p99_ms_with"] / out["claim_p99_ms_without"]
    print(
        f"policies: claims of free keys while {RATED_KEYS} keys wait for their rate "
        f"({out['waiting_for_rate']} DELAYED, {out['parked']} parked): p99 "
        f"{out['claim_p99_ms_with']:.2f} ms against {out['claim_p99_ms_without']:.2f} ms "
        f"without ({out['ratio']:.2f}x), rows read {out['rows_read_with']} against "
        f"{out['rows_read_without']}, deadlocks {deadlocks}",
        flush=True,
    )
    return out


def _burst(bench: Bench, url: str, queue: str, key: str, debounce: dict | None) -> dict:
    tag = secrets.token_hex(3)

    def produce(i: int) -> None:
        c = Client(url, bench.token)
        for n in range(i, BURST, PRODUCERS):
            request = SubmitTaskRequest(
                queue_id=queue,
                handler="noop",
                handler_version="v1",
                payload_version="v1",
                payload={"n": n},
                concurrency_key=key,
                debounce=debounce,
            )
            c.submit_task(f"{tag}-{n}", request)
        c.close()

    locks = lock_counters(bench.db)
    began = time.monotonic()
    run_threads(produce, PRODUCERS)
    seconds = time.monotonic() - began
    return {
        "submissions_per_s": BURST / seconds,
        "deadlocks": lock_delta(locks, lock_counters(bench.db))["deadlocks"],
    }


def _ran(bench: Bench, key: str) -> int:
    return bench.db.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND concurrency_key = %s "
        "AND state = 'SUCCEEDED'",
        (bench.ns, key),
    )[0]["n"]


def run_policies(bench: Bench, url: str) -> dict:
    client = Client(url, bench.token)
    queue = client.create_queue(f"policies-{secrets.token_hex(3)}").queue_id
    client.close()
    worker = noop_worker(
        bench, url, queue, 10, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        keys = {"debounce": f"deb-{secrets.token_hex(3)}", "wait": f"wait-{secrets.token_hex(3)}"}
        out = {
            "debounce": _burst(bench, url, queue, keys["debounce"], DEBOUNCE),
            "wait": _burst(bench, url, queue, keys["wait"], None),
        }
        time.sleep(DEBOUNCE["delay_ms"] / 1000 + 1.0)  # the burst's last runs after its delay
        deadline = time.monotonic() + 120
        while _ran(bench, keys["wait"]) < BURST and time.monotonic() < deadline:
            time.sleep(0.2)
        for name, key in keys.items():
            out[name]["tasks_ran"] = _ran(bench, key)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    for name, r in out.items():
        print(
            f"policies: {BURST} submissions on one key, {name}: "
            f"{r['submissions_per_s']:.0f} accepted/s, {r['tasks_ran']} tasks ran, "
            f"deadlocks {r['deadlocks']}",
            flush=True,
        )
    out["rates"] = rated_keys(bench)
    return out
