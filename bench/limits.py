"""The limits part: what a key of limit N costs (P1, P2).

The same drain twice over: 8,000 tasks submitted first, then served by the same SDK worker
processes, spread once over 400 keys of limit 1 and once over 100 keys of limit 4 (a key
policy): the same 400 permits at once either way. A key of limit 4 has one READY task at a
time (each grant promotes its next), and its holders are spread over both workers, so both
workers' reports lock the same key rows, where a key of limit 1 is held by one worker at a
time. Printed: tasks/s of each, their ratio (target >= 0.9x), InnoDB's deadlocks and the time
spent waiting for row locks; the two alternate, A B A B A B, and the ratio is of their medians.
"""

from __future__ import annotations

import statistics

from e2e import e2e
from engine_parts import Bench

TASKS = 8000
ROUNDS = 3
SHAPES = (("limit1", 400, 1), ("limit4", 100, 4))


def run_limits(bench: Bench, url: str, capacity: int) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in SHAPES}
    for _ in range(ROUNDS):
        for name, keys, limit in SHAPES:
            runs[name].append(
                e2e(
                    bench,
                    url,
                    name,
                    TASKS,
                    keys,
                    producers=4,
                    workers=2,
                    capacity=capacity,
                    drain=True,
                    batch=100,
                    key_limit=limit,
                )  # fmt: skip
            )
    out = {
        name: {
            "tasks_per_s": statistics.median(r["tasks_per_s"] for r in rs),
            "rounds_tasks_per_s": [r["tasks_per_s"] for r in rs],
            "deadlocks": sum(r["deadlocks"] for r in rs),
            "row_lock_wait_ms": sum(r["row_lock_wait_ms"] for r in rs),
            "completed": sum(r["completed"] for r in rs),
        }
        for name, rs in runs.items()
    }
    out["ratio"] = out["limit4"]["tasks_per_s"] / out["limit1"]["tasks_per_s"]
    for name, keys, limit in SHAPES:
        r = out[name]
        rounds = ", ".join(f"{x:.0f}" for x in r["rounds_tasks_per_s"])
        print(
            f"limits: {TASKS} tasks over {keys} keys of limit {limit}: "
            f"{r['tasks_per_s']:.0f} tasks/s (rounds {rounds}), deadlocks {r['deadlocks']}, "
            f"row-lock waits {r['row_lock_wait_ms']} ms in all",
            flush=True,
        )
    print(f"limits: keys of limit 4 against limit 1: {out['ratio']:.2f}x", flush=True)
    return out
