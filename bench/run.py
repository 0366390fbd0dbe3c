"""Orbit benchmarks. Every figure is measured in this one run; compare ratios.

Parts:
  ceiling    single-row UPDATE+COMMIT transactions/s at N connections (durable-commit limit)
  procedure  submit -> claim -> start -> result cycles/s calling the procedures from N threads
             (one application, then an application per thread; then batched); then the floor
             (bench/floor.py): the ceiling's UPDATE as a procedure, and the cheapest cycle
             that writes task, attempt and history rows, against the same ceiling; and the
             SPEC floor (bench/spec_floor.py): the cheapest cycle writing and checking what
             SPEC asks of each change; and what a helper CALL, a temporary table and a
             primary-key read cost inside a procedure (bench/overheads.py)
  phases     one thread, batches of 10 and 100: wall time and mariadbd CPU per phase (keys
             none, each task its own, or 1,000 shared behind a backlog); key turns of 1, 5
             and 10 keys (report-and-claim that starts what it claims: the hot-keys run's
             call, from an SDK worker without prefetch), each beside
             the SPEC floor's turn (bench/spec_floor_keys.py)
  blocked    claim latency and rows read per claim with 0 / 10k (/ 100k / 1M) parked tasks,
             behind one key of limit 1 and behind 10 keys of limit 4 with every slot held;
             an unkeyed session's claim and probe with 0 / 10k (/ 100k) READY keyed tasks;
             the sweeper's rows read per lease after 1,000 leases lapse at once behind 0 / 10k
             (/ 100k) finished tasks, and what an empty claim and its probe read there
  e2e        HTTP producers + SDK worker processes + gunicorn: tasks/s, submit-to-start p50/p99,
             for unkeyed, 1,000 keys and 10 hot keys, unpaced and paced at the targets' rates;
             peak RSS of a gunicorn and an SDK worker
  peer       Orbit and Procrastinate drain the same jobs with one worker of concurrency 10
             (Orbit over HTTP and over the direct MySQL transport, each with prefetch 0/10/40)
  cleanup    (asked for with --only cleanup) bytes on disk per finished task; a backlog of
             100k (1M) finished tasks deleted beside the e2e load, against the load alone;
             a 5-minute soak at a constant rate with a 60 s window (bench/cleanup.py)
  celery     (asked for with --only celery) Orbit's e2e shapes beside Celery with a Redis
             broker (durable and as it ships), alternated shape by shape (bench/celery_part.py)
  indexes    (asked for with --only indexes) each index of tasks: bytes per task, and the
             rows its query reads with it and without it (bench/indexes.py)
  policies   (asked for with --only policies) a debounce burst on one key against the same
             submissions parked: accepted/s, tasks run, deadlocks; claims of free keys while
             100 keys wait for their rate, against without (bench/policies.py)
  limits     (asked for with --only limits) 8,000 tasks over 400 keys of limit 1 against 100
             keys of limit 4, the same workers: tasks/s, deadlocks (bench/limits.py)
  layers     (asked for with --only layers) where a single submission's time and CPU go, and
             a worker round's: per layer, sampled with py-spy (bench/layers.py)
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import floor  # noqa: E402
import http_floor  # noqa: E402
import overheads  # noqa: E402
import slowdisk  # noqa: E402
import spec_floor  # noqa: E402
import spec_floor_keys  # noqa: E402
import targets  # noqa: E402
from celery_part import run_celery  # noqa: E402
from cleanup import run_cleanup  # noqa: E402
from e2e import e2e, start_server  # noqa: E402
from engine_parts import Bench  # noqa: E402
from indexes import run_indexes  # noqa: E402
from layers import run_layers  # noqa: E402
from limits import run_limits  # noqa: E402
from measures import (  # noqa: E402
    deadlock_reports,
    descendants,
    locks_text,
    run_threads,
    server_settings,
    vm_hwm_kib,
)
from peer import peer  # noqa: E402
from policies import run_policies  # noqa: E402

from devtools import localdb  # noqa: E402
from orbit_shell.engine import schema  # noqa: E402
from orbit_shell.sdk.client import Client  # noqa: E402
from orbit_shell.server.cleanup import DUTY as CLEANUP_DUTY  # noqa: E402


def run_ceiling(
    bench: Bench, args, parts: set[str], seconds: float, results: dict, began: dict
) -> None:
    """The single-row commit ceiling the procedure part is measured against."""
    if parts & {"ceiling", "procedure"}:
        began["ceiling"] = time.monotonic()
        results["ceiling_commits_per_s"] = bench.ceiling(args.threads, seconds)
        print(
            f"ceiling: {results['ceiling_commits_per_s']:.0f} commits/s "
            f"at {args.threads} connections",
            flush=True,
        )


def alternated(bench: Bench, threads: int, seconds: float, rounds: int = 2) -> tuple[dict, dict]:
    """The single-call cycle in one application and with an application per thread, in
    ``rounds`` alternating halves of ``seconds`` each: their ratio is a target, and this
    machine's speed drifts within a minute (one after the other, the ratio measured 0.84x to
    1.10x on the same procedures). Every other round runs them in the other order (one
    application, an application per thread, then that one again and one application), so a
    drift that runs one way through the part falls on both alike, not on whichever runs
    second. Rates are the rounds' mean, lock counts their sum."""
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(rounds):
        for per_app in (False, True) if r % 2 == 0 else (True, False):
            runs[per_app].append(
                bench.procedure_cycles(threads, seconds / rounds, app_per_thread=per_app)
            )

    def merged(parts: list[dict]) -> dict:
        out = {k: sum(p[k] for p in parts) for k in parts[0]}
        for k in ("tasks_per_s", "commits_per_task"):
            out[k] /= len(parts)
        return out

    return merged(runs[False]), merged(runs[True])


def run_procedure(
    bench: Bench, dsn: str, args, parts: set[str], seconds: float, results: dict, began: dict
) -> None:
    """Procedure cycles: one application, an application per thread, batched; the floor."""
    if "procedure" in parts:
        began["procedure"] = time.monotonic()
        ceiling = results["ceiling_commits_per_s"]
        proc, per_app = alternated(bench, args.threads, seconds)
        batched = bench.procedure_batched(args.threads, seconds)
        for part in (proc, per_app, batched):
            # tasks/s against ceiling / commits per task: printed beside the target, which is
            # read against the floor cycle (on a fast disk the ceiling counts CPU, not commits)
            part["ratio_to_ceiling_bound"] = (
                part["tasks_per_s"] * part["commits_per_task"] / ceiling
            )
        per_app["vs_one_application"] = per_app["tasks_per_s"] / proc["tasks_per_s"]
        batched["vs_single_calls"] = batched["tasks_per_s"] / proc["tasks_per_s"]
        results["procedure"] = proc
        results["procedure_app_per_thread"] = per_app
        results["procedure_batched"] = batched
        print(
            f"procedure: {proc['tasks_per_s']:.0f} tasks/s, "
            f"{proc['commits_per_task']:.2f} commits/task, "
            f"{proc['ratio_to_ceiling_bound']:.2f} of ceiling/commits; " + locks_text(proc),
            flush=True,
        )
        print(
            f"procedure, an application per thread: {per_app['tasks_per_s']:.0f} tasks/s "
            f"({per_app['vs_one_application']:.2f}x one application), "
            f"{per_app['ratio_to_ceiling_bound']:.2f} of ceiling/commits; " + locks_text(per_app),
            flush=True,
        )
        print(
            f"procedure, batches of {batched['batch']}: {batched['tasks_per_s']:.0f} tasks/s "
            f"({batched['vs_single_calls']:.2f}x single calls), "
            f"{batched['commits_per_task']:.2f} commits/task, "
            f"{batched['ratio_to_ceiling_bound']:.2f} of ceiling/commits; " + locks_text(batched),
            flush=True,
        )
        run_floors(bench, dsn, args, seconds, results)


def run_floors(bench: Bench, dsn: str, args, seconds: float, results: dict) -> None:
    """The floor, the SPEC floor and the procedure structure's costs, beside the procedure
    cycles the run has just measured (results["procedure"], [..."_app_per_thread"])."""
    ceiling = results["ceiling_commits_per_s"]
    proc, per_app = results["procedure"], results["procedure_app_per_thread"]
    results["procedure_floor"] = low = floor.run(dsn, args.threads, seconds, run_threads)
    if "skipped" in low:
        print(f"procedure floor: skipped ({low['skipped']})", flush=True)
    else:
        low["touch_ratio_to_ceiling"] = low["touch_calls_per_s"] / ceiling
        low["ratio_to_ceiling_bound"] = low["tasks_per_s"] * low["commits_per_task"] / ceiling
        low["orbit_vs_floor"] = per_app["tasks_per_s"] / low["tasks_per_s"]
        low["orbit_one_application_vs_floor"] = proc["tasks_per_s"] / low["tasks_per_s"]
        print(
            f"procedure floor (not Orbit): the ceiling's UPDATE as a procedure "
            f"{low['touch_calls_per_s']:.0f} calls/s, {low['touch_ratio_to_ceiling']:.2f} "
            f"of ceiling; a cycle writing only task, attempt and history rows "
            f"{low['tasks_per_s']:.0f} tasks/s, {low['ratio_to_ceiling_bound']:.2f} of "
            f"ceiling/commits (Orbit, an application per thread: "
            f"{low['orbit_vs_floor']:.2f}x of it)",
            flush=True,
        )
        results["procedure_spec_floor"] = spec = spec_floor.run(
            dsn, args.threads, seconds, run_threads
        )
        spec["vs_floor"] = spec["tasks_per_s"] / low["tasks_per_s"]
        spec["orbit_one_application_vs_spec_floor"] = proc["tasks_per_s"] / spec["tasks_per_s"]
        print(
            f"procedure SPEC floor (not Orbit): a cycle writing and checking what SPEC asks "
            f"of each change {spec['tasks_per_s']:.0f} tasks/s, {spec['vs_floor']:.2f}x of "
            f"the floor cycle (Orbit, one application: "
            f"{spec['orbit_one_application_vs_spec_floor']:.2f}x of it)",
            flush=True,
        )
        results["procedure_call_cpu_ms"] = mine = bench.call_costs()
        steps = [mine, spec["db_cpu_ms_per_call"], low["db_cpu_ms_per_call"]]
        cycles = [sum(costs.values()) for costs in steps]
        print(
            "procedure, one thread, mariadbd CPU per call, Orbit / the SPEC floor / the "
            "floor: "
            + ", ".join(f"{k} {' / '.join(f'{c[k]:.2f}' for c in steps)} ms" for k in mine)
            + "; a cycle "
            + " / ".join(f"{c:.2f}" for c in cycles)
            + " ms (the floor "
            f"{cycles[2] / cycles[0]:.2f}x of Orbit, {cycles[2] / cycles[1]:.2f}x of the SPEC "
            "floor)",
            flush=True,
        )
        results["procedure_overheads"] = over = overheads.run(dsn)
        us = over["cpu_us_per_iteration"]
        print(
            "procedure structure, mariadbd CPU per iteration of a loop inside one procedure, "
            f"beyond the bare loop's {us['loop']:.1f} us: a helper CALL "
            f"{us['helper_call'] - us['loop']:.1f} us (with six parameters "
            f"{us['helper_call_6_params'] - us['loop']:.1f}), a temporary table made and "
            f"emptied {us['temporary_table'] - us['loop']:.1f} us, a primary-key read "
            f"{us['primary_key_read'] - us['loop']:.1f} us; an empty procedure CALLed by the "
            f"client {us['client_call']:.1f} us",
            flush=True,
        )


def run_phases(bench: Bench, parts: set[str], results: dict, began: dict) -> None:
    """One thread through the batch procedures, phase by phase."""
    if "phases" in parts:
        began["phases"] = time.monotonic()
        results["phases"] = [
            bench.phases(1000 // batch, keys, batch)
            for batch in (10, 100)
            for keys in ("none", "own", "shared")
        ]
        for ph in results["phases"]:
            print(
                f"phases, batches of {ph['batch']}, keys {ph['keys']}, "
                "per 10 tasks: "
                + ", ".join(
                    f"{k} {ph['wall_ms_per_10'][k]:.1f} ms ({ph['db_cpu_ms_per_10'][k]:.1f} "
                    "ms db CPU)"
                    for k in ph["wall_ms_per_10"]
                )
                + f"; db CPU in all {sum(ph['db_cpu_ms_per_10'].values()):.1f} ms",
                flush=True,
            )
        # Orbit's key turns and the SPEC floor's (bench/spec_floor_keys.py), each size one
        # after the other, so that the machine's drift falls on both.
        results["phases_key_turns"], results["phases_key_turns_spec_floor"] = [], []
        for keys in (1, 5, 10):
            kt = bench.key_turns(200, keys)
            sf = spec_floor_keys.key_turns(bench.dsn, keys, 200)
            results["phases_key_turns"].append(kt)
            results["phases_key_turns_spec_floor"].append(sf)
            print(
                f"phases, key turns of {kt['keys']} (report-and-claim with start; each result "
                f"promotes its key's next task): {kt['wall_ms_per_turn']:.1f} ms a turn, "
                f"{kt['db_cpu_ms_per_turn']:.1f} ms db CPU ({kt['db_cpu_ms_per_task']:.2f} ms "
                f"a task); the SPEC floor's turn {sf['db_cpu_ms_per_turn']:.1f} ms db CPU "
                f"({sf['db_cpu_ms_per_task']:.2f} ms a task): Orbit "
                f"{kt['db_cpu_ms_per_turn'] / max(sf['db_cpu_ms_per_turn'], 0.01):.2f}x",
                flush=True,
            )
        results["phases_submit_repeated_keys"] = rep = bench.submit_repeated_keys(20)
        print(
            f"phases, submit of {rep['batch']} naming {rep['keys']} keys (repeated), "
            f"per 10 tasks: {rep['wall_ms_per_10']:.1f} ms ({rep['db_cpu_ms_per_10']:.1f} ms "
            "db CPU)",
            flush=True,
        )


def run_blocked(bench: Bench, args, parts: set[str], results: dict, began: dict) -> None:
    """Claims past parked backlogs, the sweeper, unkeyed sessions, purge lag."""
    if "blocked" in parts:
        began["blocked"] = time.monotonic()
        # Behind one busy key, then behind 10 keys of limit 4 (P1, P4) with every slot held.
        large = [100_000, 1_000_000] if args.large else []
        for name, sizes, limit, keys in (
            ("blocked", [0, 10_000, *large], 1, 1),
            ("blocked_limit", [0, 10_000, *large[1:]], 4, 10),
        ):
            results[name] = [bench.blocked(n, 200, limit=limit, keys=keys) for n in sizes]
            base = results[name][0]["claim_p99_ms"]
            behind = f" behind {keys} keys of limit {limit}" if limit > 1 else ""
            for b in results[name]:
                print(
                    f"blocked: {b['parked']:>8} parked{behind}  claim p50 "
                    f"{b['claim_p50_ms']:.2f} ms  p99 {b['claim_p99_ms']:.2f} ms "
                    f"({b['claim_p99_ms'] / base:.2f}x of 0)  rows read "
                    f"{b['rows_read_per_claim']:.0f}  release of a busy key's permit "
                    f"{b['release_of_busy_key_ms']:.1f} ms",
                    flush=True,
                )
        results["sweep"] = [
            bench.sweep(n, 1000) for n in [0, 10_000] + ([100_000] if args.large else [])
        ]
        for w in results["sweep"]:
            print(
                f"blocked: sweep of {w['expired']} expired leases behind {w['history']:>6} "
                f"finished tasks  rows read per lease {w['rows_read_per_lease']:.1f}  "
                f"{w['ms_per_lease']:.2f} ms per lease; before it, an empty claim read "
                f"{w['empty_claim_rows_read']} rows and its probe {w['probe_rows_read']}",
                flush=True,
            )
        sizes = [0, 10_000] + ([100_000] if args.large else [])
        results["unkeyed_claims"] = [bench.unkeyed_claims(n, 100) for n in sizes]
        for u in results["unkeyed_claims"]:
            print(
                f"blocked: unkeyed session, {u['ready_keyed']:>6} READY keyed tasks  claim "
                f"p50 {u['claim_p50_ms']:.2f} ms  p99 {u['claim_p99_ms']:.2f} ms  rows read "
                f"{u['rows_read_per_claim']:.0f}  empty probe p50 {u['probe_p50_ms']:.2f} ms",
                flush=True,
            )
        results["purge_lag"] = [bench.purge_lag(n) for n in sizes]  # the sizes above
        base = results["purge_lag"][0]["claim_p50_ms"]
        for g in results["purge_lag"]:
            print(
                f"blocked: claims of 10 behind {g['churned']:>6} tasks claimed and finished "
                f"under an open read view  p50 {g['claim_p50_ms']:.2f} ms "
                f"({g['claim_p50_ms'] / base:.1f}x of 0)  p99 {g['claim_p99_ms']:.2f} ms  "
                f"rows read {g['rows_read_per_claim']:.0f}  history list length "
                f"{g['history_list_length']}",
                flush=True,
            )


def submit_floor(bench: Bench, dsn: str, url: str, tasks: int, producers: int) -> dict:
    """Single submissions with no worker running, from the same producers: to Orbit (a fresh
    queue), then to the HTTP floor and to the SPEC floor's (bench/http_floor.py) on the same
    database server."""
    client = Client(url, bench.token)
    queue = client.create_queue(f"only-{secrets.token_hex(3)}").queue_id
    client.close()
    orbit = http_floor.submit_only(url, bench.token, queue, tasks, producers, run_threads)
    low, spec = (
        http_floor.floor_submissions(
            dsn, bench.db, bench.token, queue, tasks, producers, run_threads, kind
        )
        for kind in ("floor", "spec")
    )
    return {
        "orbit": orbit,
        "floor": low,
        "spec_floor": spec,
        "orbit_vs_floor": orbit["per_s"] / low["per_s"],
        "spec_floor_vs_floor": spec["per_s"] / low["per_s"],
    }


def e2e_runs(n: int, b: int, c: int) -> list[tuple[str, int, int, int, int, int]]:
    """The e2e shapes, in the order a run measures them: (name, tasks, keys, tasks per
    submission, capacity per SDK worker, submissions/s: 0 = as fast as the producers go), for
    ``n`` tasks, batches of ``b`` and capacity ``c``."""
    return [
        ("unkeyed", n, 0, b, c, 0),
        ("keys1000", n, 1000, b, c, 0),
        ("hot10", n // 4, 10, b, c, 0),
        # At the targets' rates: the latency of a queue that keeps up.
        ("unkeyed@1000", n, 0, b, c, 1000),
        ("keys1000@800", n, 1000, b, c, 800),
        ("unkeyed-cap16", n // 2, 0, b, 16, 0),  # smaller claims
        ("unbatched", n // 2, 0, 1, c, 0),  # POST /v1/tasks per task
    ]


E2E_SCENARIOS = tuple(name for name, *_ in e2e_runs(1, 1, 1))
# Rounds of a scenario whose figure is the median round's. Ten hot keys drain 2,500 tasks in
# 2-3 s, so one round swung 808-1,119 tasks/s in five runs within an hour on one machine;
# the median of three says more about the code than any one of them.
E2E_ROUNDS = {"hot10": 3}


def median_round(rounds: list[dict]) -> dict:
    """The round of median rate, with every round's rate kept beside it; its deadlocks and
    row-lock waits are those of all the rounds (a deadlock in any round counts)."""
    ranked = sorted(rounds, key=lambda r: r["tasks_per_s"])
    median = dict(ranked[len(ranked) // 2])
    if len(rounds) > 1:
        median["rounds_tasks_per_s"] = [r["tasks_per_s"] for r in rounds]
        for field in ("deadlocks", "row_lock_waits", "row_lock_wait_ms"):
            median[field] = sum(r[field] for r in rounds)
    return median


def run_served(
    bench: Bench,
    dsn: str,
    args,
    parts: set[str],
    results: dict,
    began: dict,
    scenarios: set[str] | None = None,
) -> None:
    """The parts that need an `orbit` server: peer and e2e (``scenarios`` of it, or all),
    then their figures."""
    if parts & {"e2e", "peer", "cleanup", "celery", "layers", "policies", "limits"}:
        # The bench decides when the cleanup runs (the cleanup part): the leader's is off.
        proc_server, url = start_server(dsn, workers=4, env={"ORBIT_CLEANUP_INTERVAL": "0"})
        try:
            if "cleanup" in parts:
                began["cleanup"] = time.monotonic()
                results["cleanup"] = run_cleanup(
                    bench, url, args.large, args.soak_seconds, args.cleanup_duty
                )
            if "policies" in parts:
                began["policies"] = time.monotonic()
                results["policies"] = run_policies(bench, url)
            if "limits" in parts:
                began["limits"] = time.monotonic()
                results["limits"] = run_limits(bench, url, args.capacity)
            if "layers" in parts:
                began["layers"] = time.monotonic()
                results["layers"] = run_layers(bench, url, proc_server.pid)
            if "celery" in parts:
                began["celery"] = time.monotonic()
                results["celery"] = run_celery(bench, url, args.capacity)
            if "peer" in parts:
                began["peer"] = time.monotonic()
                results["peer"] = peer(bench, url, 6000 if args.large else 2000)
            if "e2e" in parts:
                began["e2e"] = time.monotonic()
                n = 30_000 if args.large else 10_000
                runs = e2e_runs(n, args.batch, args.capacity)
                results["e2e"] = [
                    median_round(
                        [
                            e2e(
                                bench,
                                url,
                                name,
                                count,
                                keys,
                                producers=args.producers,
                                workers=2,
                                capacity=capacity,
                                batch=batch,
                                rate=rate,
                            )
                            for _ in range(E2E_ROUNDS.get(name, 1))
                        ]
                    )
                    for name, count, keys, batch, capacity, rate in runs
                    if scenarios is None or name in scenarios
                ]
                if scenarios is None or "unbatched" in scenarios:
                    results["submit_only"] = submit_floor(bench, dsn, url, n // 4, args.producers)
                children = subprocess.run(
                    ["pgrep", "-P", str(proc_server.pid)], capture_output=True, text=True
                ).stdout.split()
                results["gunicorn_worker_peak_rss_mib"] = (
                    max((vm_hwm_kib(int(c)) for c in children), default=0) / 1024
                )
        finally:
            proc_server.terminate()
            proc_server.wait(30)
        for r in results.get("e2e", []):
            print(
                f"e2e {r['scenario']:>13} (batch {r['submit_batch']}, capacity "
                f"{r['capacity']}): {r['tasks_per_s']:.0f} tasks/s "
                + (
                    "(the median of rounds of "
                    + ", ".join(f"{x:.0f}" for x in r["rounds_tasks_per_s"])
                    + ") "
                    if "rounds_tasks_per_s" in r
                    else ""
                )
                + f"(submit {r['submit_per_s']:.0f}/s), submit-to-start p50 "
                f"{r['submit_to_start_p50_ms']:.0f} ms "
                f"p99 {r['submit_to_start_p99_ms']:.0f} ms; CPU {r['cpu_busy_pct']:.0f}% busy "
                f"(mariadbd {r['mariadbd_cpu_pct']:.0f}% of the machine); attempts per "
                + ", ".join(
                    f"{k} {v:.1f}"
                    for k, v in r["attempts_per_request"].items()
                    if k != "claim_empty"
                )
                + (
                    f"; key handoff p50 {r['key_handoff_p50_ms']:.1f} ms "
                    f"p99 {r['key_handoff_p99_ms']:.1f} ms"
                    if r["keys"]
                    else ""
                )
                # Unpaced, the producers finish first; paced, the run ends with them.
                + (
                    f"; {r['done_while_submitting']} done in the {r['submitting_s']:.2f} s of "
                    f"submissions, {r['tasks_per_s_after_submissions']:.0f} tasks/s after"
                    if r["keys"] and not r["paced_submit_per_s"]
                    else ""
                )
                + f"; empty claims {r['worker_requests'].get('claim_empty', 0)}; SDK worker "
                + f"CPU {r['sdk_worker_cpu_ms_per_task']:.2f} ms/task; "
                + locks_text(r)
                + f" ({r['row_lock_wait_ms']} ms)",
                flush=True,
            )
        if "submit_only" in results:
            only = results["submit_only"]
            print(
                f"single submissions, no worker running ({args.producers} producers): "
                + "; ".join(
                    f"{label} {r['per_s']:.0f}/s, CPU {r['cpu_ms_per_task']:.2f} ms a task "
                    f"({r['cpu_busy_pct']:.0f}% busy; mariadbd "
                    f"{r['mariadbd_cpu_ms_per_task']:.2f} ms)"
                    for label, r in (
                        ("Orbit", only["orbit"]),
                        ("the HTTP floor (bench/http_floor.py, not Orbit)", only["floor"]),
                        ("the SPEC floor's (not Orbit)", only["spec_floor"]),
                    )
                )
                + f"; Orbit {only['orbit_vs_floor']:.2f}x of the floor, the SPEC floor "
                + f"{only['spec_floor_vs_floor']:.2f}x",
                flush=True,
            )
        if "e2e" in results:
            sdk = max(r["sdk_worker_peak_rss_mib"] for r in results["e2e"])
            print(
                f"memory: gunicorn worker {results['gunicorn_worker_peak_rss_mib']:.0f} MiB, "
                f"SDK worker {sdk:.0f} MiB"
            )


def finish(results: dict) -> None:
    """Each part's seconds and the targets of each profile, printed; the results written
    (ignored by git)."""
    for ran in (results, results.get("production")):
        if not ran:
            continue
        print(
            f"seconds ({ran['profile']}): "
            + ", ".join(f"{part} {took:.0f}" for part, took in ran["part_seconds"].items()),
            flush=True,
        )
        ran["targets"] = targets.summary(ran, None if ran is results else results)
        prefix = "" if ran is results else "production: "
        print("\n".join(prefix + line for line in targets.text(ran["targets"]).splitlines()))
    out = ROOT / "bench" / "results" / (time.strftime("%Y%m%dT%H%M%S") + ".json")
    out.parent.mkdir(exist_ok=True)  # ignored by git: results are printed, not committed
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--large", action="store_true", help="100k and 1M parked, longer runs")
    parser.add_argument(
        "--only",
        choices=[
            "ceiling",
            "procedure",
            "phases",
            "blocked",
            "e2e",
            "peer",
            "cleanup",
            "indexes",
            "celery",
            "layers",
            "policies",
            "limits",
        ],
        nargs="*",
    )
    parser.add_argument(
        "--scenario",
        choices=list(E2E_SCENARIOS),
        nargs="*",
        help="e2e shapes to run (default: all; the production profile runs "
        + ", ".join(sorted(PRODUCTION_SCENARIOS))
        + ")",
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--soak-seconds",
        type=float,
        default=300.0,
        help="the cleanup part's soak (5 minutes; 0 leaves it out)",
    )
    parser.add_argument(
        "--cleanup-duty",
        type=float,
        default=CLEANUP_DUTY,
        help="the share of its time the cleanup part's pass deletes beside the load "
        "(the leader's, 0.1)",
    )
    parser.add_argument(
        "--binlog",
        action="store_true",
        help="private server with binary logging synced per commit (MySQL 8's default)",
    )
    parser.add_argument(
        "--flush-delay-ms",
        type=float,
        default=0.0,
        help="private server whose every flush returns this much later (an emulated disk "
        "without a write cache; bench/slowdisk.py)",
    )
    parser.add_argument(
        "--capacity", type=int, default=100, help="capacity of each e2e SDK worker process"
    )
    parser.add_argument(
        "--producers",
        type=int,
        default=8,
        help="e2e producer threads, each with one request in flight (the targets' shape is 8)",
    )
    parser.add_argument(
        "--batch", type=int, default=100, help="tasks per submission request of the e2e producers"
    )
    parser.add_argument(
        "--profile",
        choices=["both", "default", "production"],
        default="both",
        help="default: a private server as MariaDB ships; production: binary log synced per "
        "commit and each flush 1 ms slower (what a server with replicas runs on a disk without "
        "a write cache), for the ceiling, procedure and e2e parts; both (the default): one "
        "after the other, side by side",
    )
    args = parser.parse_args()
    if not 1 <= args.threads <= 64:
        parser.error("--threads must be 1-64 (the ceiling updates one of 64 rows per thread)")
    if not 1 <= args.producers <= 64:
        parser.error("--producers must be 1-64")
    if not 0 <= args.flush_delay_ms <= 1000:
        parser.error("--flush-delay-ms must be 0-1000")
    if os.environ.get("ORBIT_MYSQL_DSN") and (args.binlog or args.flush_delay_ms):
        parser.error(
            "--binlog and --flush-delay-ms set up the private server; "
            "ORBIT_MYSQL_DSN names one as it is"
        )
    return args, parser


def private_server(binlog: bool, flush_delay_ms: float, parser) -> localdb.PrivateServer:
    """The bench's own MariaDB, empty, with the binary log and disk asked for."""
    name = "bench-db" + ("-binlog" if binlog else "")
    extra = {}
    if flush_delay_ms:
        name += "-slowflush"
        try:
            extra = slowdisk.environment(ROOT / ".scratch", flush_delay_ms)
        except slowdisk.SlowDiskError as exc:
            parser.error(str(exc))
    own = localdb.PrivateServer(
        ROOT / ".scratch" / name,
        localdb.ensure_binaries(),
        binlog=binlog,
        environment=extra,
        # Every deadlock written out whole: the counters say how many, and a rare one is
        # understood only from its report (the run keeps them, run_profile).
        options=("--innodb-print-all-deadlocks=ON",),
    )
    if flush_delay_ms and own.running():
        own.stop()  # left by a run that stopped early, perhaps with another delay
    if not own.running():
        # Every run from an empty server: data left by earlier runs (1.9 GB after a day's
        # runs) would make a run's figures depend on how many ran before it.
        shutil.rmtree(own.datadir, ignore_errors=True)
    return own


# The production profile: what a server with replicas runs (binary log synced per commit,
# MySQL 8's default) on a disk whose flush takes a millisecond. The parts and e2e scenarios
# it runs: those whose figures the hot path is judged by.
PRODUCTION = {"binlog": True, "flush_delay_ms": 1.0}
PRODUCTION_PARTS = {"ceiling", "procedure", "e2e", "cleanup"}
PRODUCTION_SCENARIOS = {"unkeyed", "keys1000", "hot10", "unbatched"}


def run_profile(name: str, args, parser, parts: set[str], seconds: float) -> dict:
    """Every part asked for, on one server: the DSN given, or a private server of the
    profile (``default``: as MariaDB ships, or as --binlog / --flush-delay-ms say)."""
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    own = None
    if not dsn:
        if name == "production":
            own = private_server(PRODUCTION["binlog"], PRODUCTION["flush_delay_ms"], parser)
        else:
            own = private_server(args.binlog, args.flush_delay_ms, parser)
        dsn = own.start()
    logged = own.logfile.stat().st_size if own and own.logfile.exists() else 0
    try:
        schema.apply(dsn)
        bench = Bench(dsn)
        results: dict = {
            "profile": name,
            "when": dt.datetime.now(dt.UTC).isoformat(),
            "threads": args.threads,
            "cores": os.cpu_count(),
            "server": server_settings(bench.db),
        }
        if own:
            # The premise of "the durable-commit limit": what a flush costs on this disk.
            results["server"]["disk_flush_us"] = f"{slowdisk.flush_us(own.datadir):.0f}"
            results["server"]["flush_delay_ms"] = (
                f"{PRODUCTION['flush_delay_ms'] if name == 'production' else args.flush_delay_ms:g}"
            )
        print(
            f"{name} server: " + ", ".join(f"{k} {v}" for k, v in results["server"].items()),
            flush=True,
        )
        # When each part began: the default run should finish in under 10 minutes, and on a
        # slow day one part (Procrastinate's keyed drain) takes a fifth of it.
        began: dict[str, float] = {}
        scenarios = set(args.scenario) if args.scenario else None
        if name == "production":
            scenarios = (scenarios or set(E2E_SCENARIOS)) & PRODUCTION_SCENARIOS
        run_ceiling(bench, args, parts, seconds, results, began)
        run_procedure(bench, dsn, args, parts, seconds, results, began)
        run_phases(bench, parts, results, began)
        run_blocked(bench, args, parts, results, began)
        if "indexes" in parts:
            began["indexes"] = time.monotonic()
            results["indexes"] = run_indexes(bench)
        run_served(bench, dsn, args, parts, results, began, scenarios)
        ends = [*list(began.values())[1:], time.monotonic()]
        results["part_seconds"] = {
            part: round(end - start, 1)
            for (part, start), end in zip(began.items(), ends, strict=True)
        }
        if own:
            results["deadlock_reports"] = deadlock_reports(own.logfile, logged)
            if results["deadlock_reports"]:
                print(
                    f"deadlock reports ({name}): {len(results['deadlock_reports'])}, kept in the "
                    "results file (deadlock_reports) and in " + str(own.logfile.relative_to(ROOT)),
                    flush=True,
                )
        return results
    finally:
        if own:
            own.stop()


def side_by_side(default: dict, production: dict) -> None:
    """The figures both profiles measured, one line each, with production / default."""
    rows = []
    if "procedure" in default and "procedure" in production:
        for label, get in (
            ("ceiling, commits/s", lambda r: r["ceiling_commits_per_s"]),
            ("procedure, one application, tasks/s", lambda r: r["procedure"]["tasks_per_s"]),
            (
                "procedure, one application / an application per thread",
                lambda r: 1 / r["procedure_app_per_thread"]["vs_one_application"],
            ),
            (
                "procedure, one application / the floor cycle",
                lambda r: r["procedure_floor"].get("orbit_one_application_vs_floor", 0.0),
            ),
            (
                "procedure, the SPEC floor cycle / the floor cycle",
                lambda r: r.get("procedure_spec_floor", {}).get("vs_floor", 0.0),
            ),
        ):
            rows.append((label, get(default), get(production)))
    by_name = {r["scenario"]: r for r in default.get("e2e", [])}
    for r in production.get("e2e", []):
        if r["scenario"] in by_name:
            d = by_name[r["scenario"]]
            rows.append((f"e2e {r['scenario']}, tasks/s", d["tasks_per_s"], r["tasks_per_s"]))
            if r["keys"]:
                rows.append(
                    (
                        f"e2e {r['scenario']}, key handoff p50 / p99 ms",
                        f"{d['key_handoff_p50_ms']:.1f} / {d['key_handoff_p99_ms']:.1f}",
                        f"{r['key_handoff_p50_ms']:.1f} / {r['key_handoff_p99_ms']:.1f}",
                    )
                )
    print("profiles: figure | default | production (binlog synced, +1 ms a flush) | ratio")
    for label, d, p in rows:
        if isinstance(d, str):
            print(f"  {label} | {d} | {p}")
        else:
            print(f"  {label} | {d:,.2f} | {p:,.2f} | {p / d if d else 0:.2f}x")


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)  # so that every part's finally stops what it started


def _stop_descendants() -> None:
    """Whatever the run started that is still running once it ends, stopped or not: an
    ``orbit`` server, SDK or Celery workers, a private mariadbd or Redis. Left running, a
    server kept sweeping the next run's database."""
    me = os.getpid()
    for pid in reversed(descendants(me)):
        if pid != me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminated)
    atexit.register(_stop_descendants)
    args, parser = parse_args()
    parts = set(args.only or ["ceiling", "procedure", "phases", "blocked", "e2e", "peer"])
    seconds = 20.0 if args.large else 8.0
    custom = bool(args.binlog or args.flush_delay_ms or os.environ.get("ORBIT_MYSQL_DSN"))
    profiles = ["default"] if custom or args.profile == "default" else ["production"]
    if args.profile == "both" and not custom:
        profiles = ["default", "production"]
    results: dict = {}
    for name in profiles:
        asked = parts if name == "default" else parts & PRODUCTION_PARTS
        if not asked:
            continue
        if name == "production":
            try:  # the emulated disk needs a C compiler; say so and run the rest
                slowdisk.build(ROOT / ".scratch")
            except slowdisk.SlowDiskError as exc:
                print(f"production profile: skipped ({exc})", flush=True)
                continue
        ran = run_profile(name, args, parser, asked, seconds)
        if results:
            results["production"] = ran
        else:
            results = ran
    if "production" in results:
        side_by_side(results, results["production"])
    finish(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
