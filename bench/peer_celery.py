"""Celery with a Redis broker, run by the bench as it runs its private MariaDB: a private
``redis-server`` (installed with apt when missing), Celery workers from ``bench/celery_tasks.py``
and producer threads, measured as the e2e part measures Orbit.

Two Redis settings: **durable** (``appendonly yes``, ``appendfsync always``: an acknowledged
task survives a crash, as Orbit's commit does) and **default** (as Redis ships: a snapshot now
and then, a crash loses what came after it). Workers: ``workers`` processes, each of the
threads pool at ``concurrency``, or of the prefork pool with one child per core.
"""

from __future__ import annotations

import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measures import cpu_sample, pct, run_threads, wait_turn

from devtools import localdb

HERE = Path(__file__).resolve().parent


class PeerMissing(RuntimeError):
    pass


def redis_binary() -> str:
    """``redis-server``, installed with apt-get when missing and this is root on Debian."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("celery: installing redis-server with apt-get", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "redis-server"],
            check=True,
            env=env,
            capture_output=True,
        )
        found = shutil.which("redis-server")
    if not found:
        raise PeerMissing(
            "redis-server is missing; install it (Debian: apt-get install redis-server)"
        )
    return found


class Redis:
    """A private redis-server on a loopback port with its own directory."""

    def __init__(self, durable: bool) -> None:
        self.durable = durable
        self.port = localdb.free_port()
        self.dir = tempfile.mkdtemp(prefix="orbit-bench-redis-")
        options = ["--appendonly", "yes", "--appendfsync", "always"] if durable else []
        self.proc = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
            + ["--daemonize", "no", "--protected-mode", "yes", *options],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _counts(out: str) -> int:
    total = 0
    for path in glob.glob(os.path.join(out, "*.count")):
        try:
            total += int(Path(path).read_text() or 0)
        except (OSError, ValueError):
            pass
    return total


def run(
    broker: Redis,
    tasks: int,
    keys: int = 0,
    producers: int = 8,
    group: int = 1,
    rate: float = 0.0,
    workers: int = 2,
    pool: str = "threads",
    concurrency: int = 10,
) -> dict:
    """One run: ``workers`` Celery worker processes consuming while ``producers`` threads send
    ``tasks`` (``group`` at a time as one group; at ``rate`` tasks/s in all when set), keyed
    over ``keys`` keys (the lock recipe) or not. Figures as the e2e part's: tasks/s from the
    first send to the last task run, the machine's CPU per task, submit-to-start, and for keys
    the handoff (a lock given back to the key's next task taking it) and overlaps."""
    from celery import Celery
    from celery import group as celery_group

    out = tempfile.mkdtemp(prefix="orbit-bench-celery-")
    broker.client.flushall()
    env = dict(
        os.environ,
        CELERY_BROKER=broker.url,
        CELERY_BENCH_DIR=out,
        PYTHONPATH=str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    # The producers' own app, of this run's broker, sending the workers' tasks by name.
    sender = Celery("bench-producer", broker=broker.url)
    sender.conf.update(task_default_queue="bench", task_ignore_result=True)
    celery = str(Path(sys.executable).with_name("celery"))
    size = ["--concurrency", str(concurrency)] if pool == "threads" else []
    procs = [
        subprocess.Popen(
            [celery, "-A", "celery_tasks", "worker", "--pool", pool, *size, "-Q", "bench"]
            + ["--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "WARNING"]
            + ["-n", f"bench{i}@%h"],
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(workers)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(glob.glob(os.path.join(out, "*.ready"))) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError("celery workers did not start")
            time.sleep(0.05)
        started = time.monotonic()
        cpu_before = cpu_sample()

        def produce(i: int) -> None:
            mine = list(range(i, tasks, producers))
            for k, at in enumerate(range(0, len(mine), group)):
                if rate:
                    wait_turn(started, k, i, producers, rate, group)
                chunk = mine[at : at + group]
                if keys:
                    sigs = [sender.signature("keyed", (f"k{n % keys}", time.time())) for n in chunk]
                else:
                    sigs = [sender.signature("noop", (time.time(),)) for _ in chunk]
                if group == 1:
                    sigs[0].apply_async()
                else:
                    celery_group(sigs, app=sender).apply_async()

        run_threads(produce, producers)
        while _counts(out) < tasks and time.monotonic() - started < 600:
            time.sleep(0.01)
        finished = time.monotonic()
        cpu_after = cpu_sample()
        done = _counts(out)
    finally:
        sender.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    latencies: list[float] = []
    holds: dict[str, list[tuple[float, float]]] = {}
    overlaps = 0
    for path in glob.glob(os.path.join(out, "*.log")):
        for line in Path(path).read_text().splitlines():
            kind, *rest = line.split()
            if kind == "L":
                latencies.append(float(rest[0]))
            elif kind == "K":
                holds.setdefault(rest[0], []).append((float(rest[1]), float(rest[2])))
                overlaps += len(rest) > 3
    handoffs = [
        1000 * (b[0] - a[1])
        for spans in holds.values()
        for a, b in zip(sorted(spans), sorted(spans)[1:], strict=False)
    ]
    shutil.rmtree(out, ignore_errors=True)
    busy = cpu_after[0] - cpu_before[0]
    total = cpu_after[1] - cpu_before[1]
    elapsed = finished - started
    return {
        "redis": "durable" if broker.durable else "default",
        "pool": pool,
        "concurrency": concurrency if pool == "threads" else os.cpu_count(),
        "workers": workers,
        "tasks": tasks,
        "keys": keys,
        "group": group,
        "paced_submit_per_s": rate,
        "completed": done,
        "tasks_per_s": done / elapsed,
        "cpu_ms_per_task": 1000 * busy / done if done else 0.0,
        "cpu_busy_pct": 100 * busy / total if total else 0.0,
        "submit_to_start_p50_ms": pct(latencies, 50),
        "submit_to_start_p99_ms": pct(latencies, 99),
        "key_handoff_p50_ms": statistics.median(handoffs) if handoffs else 0.0,
        "overlaps": overlaps,
    }
