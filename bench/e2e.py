"""The e2e part: an `orbit` server, HTTP producers and SDK worker processes, and what the
machine, mariadbd and the workers spend while 10,000 tasks go through."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine_parts import Bench
from measures import (
    cpu_by_process,
    cpu_sample,
    cpu_split,
    lock_counters,
    lock_delta,
    pct,
    run_threads,
    wait_turn,
)

from devtools import localdb
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest
from orbit_shell.sdk.producer import DirectProducer

ROOT = Path(__file__).resolve().parent.parent


def start_server(
    dsn: str,
    workers: int,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    name: str = "bench-server",
):
    """``orbit`` (or ``command``, a server configured the same way) on a free port, with
    ``env`` added; returns the process and its URL once ``/readyz`` answers. Its output goes
    to ``.scratch/<name>.log``."""
    port = localdb.free_port()
    env = dict(
        os.environ,
        ORBIT_MYSQL_DSN=dsn,
        ORBIT_HTTP_ADDR=f"127.0.0.1:{port}",
        ORBIT_HTTP_WORKERS=str(workers),
        # The per-credential submission limit is a policy knob, not what is measured: once
        # submission got cheaper, the peer part's queueing ran into it (429) and its producers
        # died. Off for the bench server.
        ORBIT_SUBMIT_RATE="0",
        **(env or {}),
    )
    log = open(ROOT / ".scratch" / f"{name}.log", "w")  # noqa: SIM115 - lives with the server
    command = command or [str(Path(sys.executable).with_name("orbit"))]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            import urllib.request

            urllib.request.urlopen(url + "/readyz", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{command[-1]} did not start; see .scratch/{name}.log")


def noop_worker(bench: Bench, url: str, queue: str, capacity: int, **popen) -> subprocess.Popen:
    """One SDK worker process (bench/noop_worker.py) on ``queue`` over HTTP, without prefetch,
    reporting and claiming in one call when its slots are full."""
    env = dict(os.environ, ORBIT_URL=url, ORBIT_TOKEN=bench.token, QUEUE_IDS=queue,
               CAPACITY=str(capacity), PREFETCH="0", CLAIM_WITH_REPORT="1")  # fmt: skip
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / "noop_worker.py")], env=env,
                            **popen)  # fmt: skip


def key_handoffs_ms(bench: Bench, queue: int) -> list[float]:
    """For each key of the queue, in token order, the milliseconds from one attempt's result
    being recorded to the start of the key's next attempt: how long a freed key stays idle
    while work waits for it (the hot-keys figure). Keys whose next task was not yet submitted
    count too; in the unpaced runs the producers stay ahead."""
    rows = bench.db.query(
        "SELECT TIMESTAMPDIFF(MICROSECOND, previous, started_at) / 1000 AS ms FROM ("
        " SELECT a.started_at, LAG(a.finished_at) OVER ("
        "   PARTITION BY t.concurrency_key ORDER BY a.concurrency_token) AS previous"
        " FROM tasks t JOIN attempts a ON a.task_id = t.id"
        " WHERE t.queue_id = %s AND t.concurrency_key <> '' AND a.started_at IS NOT NULL"
        ") handed WHERE previous IS NOT NULL",
        (queue,),
    )
    return [float(r["ms"]) for r in rows]


def after_submissions(bench: Bench, queue: int, done: int) -> dict:
    """The run split at the last submission (the database's clock): how many of the ``done``
    tasks finished while the producers still submitted, over how many seconds, and the rate
    after. In an unpaced run the producers finish well before the workers, and while they
    submit their batches hold the key rows and the cores the workers need: the whole run's
    rate mixes the two."""
    [row] = bench.db.query(
        "SELECT MIN(created_at) AS first, MAX(created_at) AS last FROM tasks WHERE queue_id = %s",
        (queue,),
    )
    if row["last"] is None:  # nothing was submitted
        return dict(submitting_s=0.0, done_while_submitting=0, tasks_per_s_after_submissions=0.0)
    [split] = bench.db.query(
        "SELECT COALESCE(SUM(finished_at <= %s), 0) AS done_while, MAX(finished_at) AS end"
        " FROM attempts WHERE queue_id = %s AND state = 'SUCCEEDED'",
        (row["last"], queue),
    )
    after_s = (split["end"] - row["last"]).total_seconds() if split["end"] else 0.0
    done_while = int(split["done_while"])
    return {
        "submitting_s": (row["last"] - row["first"]).total_seconds(),
        "done_while_submitting": done_while,
        "tasks_per_s_after_submissions": (done - done_while) / after_s if after_s > 0 else 0.0,
    }


def e2e(
    bench: Bench,
    url: str,
    name: str,
    tasks: int,
    keys: int,
    producers: int,
    workers: int,
    capacity: int,
    drain: bool = False,
    batch: int = 50,
    prefetch: int = 0,
    direct: bool = False,
    rate: float = 0.0,
    claim_with_report: bool = True,
    direct_producer: bool = False,
    key_limit: int = 1,
) -> dict:
    """Producers and SDK worker processes together; with ``drain`` the tasks are all submitted
    first and the clock starts when the workers do (the peer's way of measuring). Producers
    send ``batch`` tasks per request (POST /v1/tasks/batch; 1 = POST /v1/tasks each), at
    ``rate`` tasks/s in all when it is set (the submit-to-start latency of a queue that keeps
    up, where an unpaced run measures the backlog the producers build). With
    ``direct_producer`` the producers submit over MySQL (``DirectProducer``) instead of HTTP.
    With ``key_limit`` above 1 a key policy lets each of the run's keys admit that many
    holders (P1)."""
    client = Client(url, bench.token)
    queue = client.create_queue(f"e2e-{name}-{secrets.token_hex(3)}", lease_seconds=30).queue_id
    if key_limit > 1:
        client.set_key_policy(key_limit, prefix=f"{name}-{queue}-")
    client.close()
    env = dict(
        os.environ,
        ORBIT_URL=url,
        ORBIT_TOKEN=bench.token,
        QUEUE_IDS=queue,
        CAPACITY=str(capacity),
        PREFETCH=str(prefetch),
        CLAIM_WITH_REPORT="1" if claim_with_report else "0",
    )
    if direct:  # the SDK workers call the procedures over MySQL (W9) instead of HTTP
        env.update(
            ORBIT_WORKER_DSN=bench.worker_dsn,
            ORBIT_APPLICATION=bench.application,
            ORBIT_ENVIRONMENT="bench",
            ORBIT_NAMESPACE="ns",
        )

    def spawn_workers():
        return [
            subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "noop_worker.py")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(workers)
        ]

    procs = [] if drain else spawn_workers()
    spawned = time.monotonic()
    time.sleep(0 if drain else 1.0)
    started = time.monotonic()
    cpu_before, processes_before = cpu_sample(), cpu_by_process()
    locks_before = lock_counters(bench.db)

    producer_dsn = bench.producer_dsn if direct_producer else None  # made once, not per thread

    def produce(i: int) -> None:
        c = (
            DirectProducer(producer_dsn, bench.application, "bench", "ns")
            if producer_dsn
            else Client(url, bench.token)
        )
        mine = [
            (
                f"{name}-{queue}-{n}",
                SubmitTaskRequest(
                    queue_id=queue,
                    handler="noop",
                    handler_version="v1",
                    payload_version="v1",
                    payload={"n": n},
                    concurrency_key=f"{name}-{queue}-{n % keys}" if keys else None,
                ),
            )
            for n in range(i, tasks, producers)
        ]
        for k, at in enumerate(range(0, len(mine), batch)):
            if rate:
                wait_turn(started, k, i, producers, rate, batch)
            if batch == 1:
                c.submit_task(*mine[at])
                continue
            refused = [r for r in c.submit_tasks(mine[at : at + batch]) if isinstance(r, Exception)]
            if refused:
                raise RuntimeError(f"submissions refused: {refused[:3]}")
        c.close()

    run_threads(produce, producers)
    submit_s = time.monotonic() - started
    if drain:
        procs = spawn_workers()
        spawned = started = time.monotonic()  # until the worker says it is ready (below)
    [row] = bench.db.query("SELECT id FROM queues WHERE public_id = %s", (queue,))
    # Done when the queue has no WAITING task and no attempt in flight (the no-op handler
    # leaves none for review); every task is submitted by now. Two existence reads, one index
    # entry each: the queue keeps no count without a limit, and counting the queue's tasks
    # instead read all of them each poll (1.4-3.7 ms of the server's CPU every 10 ms, taken
    # from the drain it timed).
    while True:
        [left] = bench.db.query(
            "SELECT EXISTS (SELECT 1 FROM tasks FORCE INDEX (ix_tasks_claim)"
            " WHERE queue_id = %s AND lane IS NOT NULL)"
            " OR EXISTS (SELECT 1 FROM attempts FORCE INDEX (ix_attempts_queue_lease)"
            " WHERE queue_id = %s AND state IN ('LEASED', 'RUNNING')) AS busy",
            (row["id"], row["id"]),
        )
        if not left["busy"] or time.monotonic() - started > 600:
            break
        time.sleep(0.01 if drain else 0.05)
    finished = time.monotonic()
    cpu_after, processes_after = cpu_sample(), cpu_by_process()
    locks = lock_delta(locks_before, lock_counters(bench.db))
    [done] = bench.db.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE queue_id = %s AND state = 'SUCCEEDED'", (row["id"],)
    )
    if done["n"] != tasks:  # a task lost or stuck is a defect, never only a lower figure
        print(f"e2e {name}: {tasks - done['n']} of {tasks} tasks did not succeed", flush=True)
    total = cpu_after[1] - cpu_before[1]
    lat = bench.db.query(
        "SELECT TIMESTAMPDIFF(MICROSECOND, t.created_at, a.started_at) / 1000 AS ms FROM tasks t "
        "JOIN attempts a ON a.task_id = t.id WHERE t.queue_id = %s AND a.started_at IS NOT NULL",
        (row["id"],),
    )
    ms = [float(r["ms"]) for r in lat]
    handoff = key_handoffs_ms(bench, row["id"]) if keys else []
    split = after_submissions(bench, row["id"], done["n"])
    rss: list[int] = []
    readies: list[float] = []
    cpu_s = 0.0
    sizes: dict[str, tuple[int, int, float]] = {}
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        out, _ = p.communicate(timeout=30)
        for line in out.splitlines():
            field, _, value = line.partition("=")
            if field == "rss_kib":
                rss.append(int(value))
            elif field == "ready":
                readies.append(float(value))
            elif field == "cpu_s":
                cpu_s += float(value)
            elif field.startswith("calls_"):
                calls, items, seconds = value.split(",")
                was = sizes.get(field[6:], (0, 0, 0.0))
                sizes[field[6:]] = (
                    was[0] + int(calls),
                    was[1] + int(items),
                    was[2] + float(seconds),
                )
    startup = min(readies, default=spawned) - spawned
    if drain:
        # The peer's clock starts with its app open and its worker about to run; this one
        # starts when the first worker process has imported, connected and is about to run,
        # not at its spawn (Python's start-up and imports are not draining).
        started = max(started, spawned + startup)
    elapsed = finished - started
    return {
        "scenario": name,
        "producers": producers,
        "submit_batch": batch,
        "capacity": capacity,
        "prefetch": prefetch,
        "claim_with_report": claim_with_report,
        "transport": "mysql" if direct else "http",
        "producer": "mysql" if direct_producer else "http",
        "worker_startup_s": startup,
        "paced_submit_per_s": rate,
        "tasks": tasks,
        "keys": keys,
        "key_limit": key_limit,
        "completed": done["n"],
        "tasks_per_s": done["n"] / elapsed,
        "submit_per_s": tasks / submit_s,
        "submit_to_start_p50_ms": pct(ms, 50),
        "submit_to_start_p99_ms": pct(ms, 99),
        # A key's turn: from one task's result recorded to the start of the key's next one.
        "key_handoff_p50_ms": pct(handoff, 50),
        "key_handoff_p99_ms": pct(handoff, 99),
        **split,
        "sdk_worker_peak_rss_mib": max(rss, default=0) / 1024,
        # The SDK workers' own CPU (after start-up) per task: the client's share of a round.
        "sdk_worker_cpu_ms_per_task": 1000 * cpu_s / done["n"] if done["n"] else 0.0,
        "worker_requests": {k: c for k, (c, _, _) in sizes.items()},
        "attempts_per_request": {k: i / c for k, (c, i, _) in sizes.items() if c},
        "request_ms": {k: 1000 * s / c for k, (c, _, s) in sizes.items() if c},
        "cpu_busy_pct": 100 * (cpu_after[0] - cpu_before[0]) / total if total else 0.0,
        "mariadbd_cpu_pct": 100 * (cpu_after[2] - cpu_before[2]) / total if total else 0.0,
        # Where a task's CPU went: producers (this process), server, mariadbd, workers.
        "cpu_split_ms_per_task": cpu_split(processes_before, processes_after, done["n"] or 1),
        **locks,
    }
