"""Worker processes for acceptance tests (tests/acceptance/worker_proc.py), with their output
collected line by line and reaped after each test by the conftest fixture."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER = Path(__file__).with_name("worker_proc.py")


def spawn(url, tenant, queue_id, fence_dsn, sleep=0.0, value="v", prefetch=0):
    env = dict(
        os.environ,
        ORBIT_URL=url,
        ORBIT_TOKEN=tenant.token,
        QUEUE_ID=queue_id,
        FENCE_DSN=fence_dsn,
        FENCE_NAMESPACE=tenant.namespace,
        HANDLER_SLEEP=str(sleep),
        VALUE=value,
        PREFETCH=str(prefetch),
    )
    proc = subprocess.Popen(
        [sys.executable, str(WORKER)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True
    ).start()
    proc.lines = lines
    SPAWNED.append(proc)
    return proc


SPAWNED: list[subprocess.Popen] = []


def reap() -> None:
    """Stop every spawned worker and close its pipe, whatever the test did."""
    while SPAWNED:
        proc = SPAWNED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdout.close()


def read_line(proc, prefix: str, timeout: float = 20.0) -> str:
    """Wait for the first output line of ``proc`` starting with ``prefix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(proc.lines):
            if line.startswith(prefix):
                return line.strip()
        if proc.poll() is not None and not any(x.startswith(prefix) for x in proc.lines):
            break
        time.sleep(0.05)
    raise AssertionError(f"worker never printed {prefix!r}")
