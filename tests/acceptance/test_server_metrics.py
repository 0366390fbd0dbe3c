"""`/metrics` of the `orbit` server: one count for the whole server, whichever of its gunicorn
worker processes answers the scrape."""

from __future__ import annotations

import re
import signal
import time
import urllib.request

import psutil

from tests.acceptance.conftest import launch_orbit, stop_orbit


def get(url: str) -> str:
    """One request on a new connection: any worker process may accept it."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def healthz_count(url: str) -> float:
    """`GET /healthz` 200s as one scrape reports them."""
    found = re.search(
        r'^orbit_http_requests_total\{method="GET",route="/healthz",status="200"\} (\S+)$',
        get(url + "/metrics"),
        re.M,
    )
    return float(found.group(1)) if found else 0.0


def served_by(worker: psutil.Process, others: list[psutil.Process], url: str, n: int) -> None:
    """``n`` requests that only ``worker`` can accept: the others are stopped meanwhile."""
    for other in others:
        other.send_signal(signal.SIGSTOP)
    try:
        for _ in range(n):
            get(url + "/healthz")
    finally:
        for other in others:
            other.send_signal(signal.SIGCONT)


def worker_processes(proc, n: int) -> list[psutil.Process]:
    """The server's ``n`` gunicorn workers. gunicorn forks them one after another, with a
    random pause of up to 0.1 s between; the first can answer /readyz before the next exists."""
    deadline = time.monotonic() + 10
    while len(workers := psutil.Process(proc.pid).children()) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return workers


def test_every_scrape_counts_the_requests_of_every_worker_process(orbit_dsn, tmp_path):
    # Without a shared metrics directory each worker counts only what it served, and a
    # scrape reports whichever worker answered it.
    proc = launch_orbit(orbit_dsn, tmp_path / "server.log")
    try:
        workers = worker_processes(proc, 2)
        assert len(workers) == 2
        first, second = workers
        served_by(first, [second], proc.url, 15)
        served_by(second, [first], proc.url, 25)
        assert [healthz_count(proc.url) for _ in range(8)] == [40] * 8
    finally:
        stop_orbit(proc)


def test_a_named_metrics_directory_starts_each_run_at_zero(orbit_dsn, tmp_path):
    # prometheus_client keeps a process's samples in files there; a restarted server must not
    # add the previous run's to its own.
    shared = tmp_path / "metrics"
    for run, requests in (("first", 7), ("second", 3)):
        proc = launch_orbit(
            orbit_dsn, tmp_path / f"{run}.log", PROMETHEUS_MULTIPROC_DIR=str(shared)
        )
        try:
            for _ in range(requests):
                get(proc.url + "/healthz")
            assert healthz_count(proc.url) == requests, run
            # The database's purge gauges ride along in every scrape of the shared registry.
            assert re.search(r"^orbit_db_history_list_length \d", get(proc.url + "/metrics"), re.M)
        finally:
            stop_orbit(proc)
        assert list(shared.glob("*.db")), "the samples live in the named directory"
