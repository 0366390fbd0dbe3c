"""The policies part: what the busy-key choices cost (P5).

A debounce burst: 8 producer threads send ``BURST`` single submissions on one key, each with
``"debounce": {"delay_ms": 200, "max_wait_ms": 2000}``, while an SDK worker process serves the
queue; then the same submissions without the debounce (each parked behind the key, K4) on
another key. Printed: the submissions accepted per second each way, the tasks of the burst
that ran (a debounce should run a handful: one per max_wait while the burst lasts, and the
last), and InnoDB's deadlocks meanwhile.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import time
from pathlib import Path

from e2e import noop_worker
from engine_parts import Bench
from measures import lock_counters, lock_delta, run_threads

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest

ROOT = Path(__file__).resolve().parent.parent
BURST = 2000
PRODUCERS = 8
DEBOUNCE = {"delay_ms": 200, "max_wait_ms": 2000}


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
    return out
