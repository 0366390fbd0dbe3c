"""Acceptance fixtures: the real `orbit` server (gunicorn) as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from devtools import localdb
from tests.acceptance.procs import reap


def script(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


@pytest.fixture(scope="package")
def orbit_server(orbit_process):
    """The base URL of the acceptance tests' `orbit` server."""
    return orbit_process.url


@pytest.fixture(scope="package")
def orbit_process(orbit_dsn, tmp_path_factory):
    """`orbit` on a free port against the session database; yields the Popen (with .url).
    Stopped when the acceptance tests end: its sweeper would otherwise go on recovering
    leases and due retries in the database the integration tests share, between a test's
    clock move and the probe or claim it means to observe. Its leader runs no cleanup pass:
    one every minute over every namespace would, now and then, clean a tenant a test has just
    made before the test reads it as never cleaned (the tests that clean call the routine)."""
    proc = launch_orbit(
        orbit_dsn, tmp_path_factory.mktemp("orbit") / "server.log", ORBIT_CLEANUP_INTERVAL="0"
    )
    yield proc
    stop_orbit(proc)


def launch_orbit(dsn: str, log, new_session: bool = False, **env: str) -> subprocess.Popen:
    """Start `orbit` (two gunicorn workers) on a free port and wait until it is ready; the
    Popen carries its base URL as ``.url``. ``env`` overrides its environment; with
    ``new_session`` the server and its workers are a process group of their own (to kill
    whole)."""
    port = localdb.free_port()
    env = {
        **os.environ,
        "ORBIT_MYSQL_DSN": dsn,
        "ORBIT_HTTP_ADDR": f"127.0.0.1:{port}",
        "ORBIT_HTTP_WORKERS": "2",
        "ORBIT_SWEEP_INTERVAL": "0.5",
        **env,
    }
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [script("orbit")], env=env, stdout=out, stderr=out, start_new_session=new_session
        )
    url = proc.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1)
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("orbit did not start:\n" + log.read_text()) from None
            time.sleep(0.2)


def stop_orbit(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL once gunicorn's graceful timeout (20 s) has passed; reaped."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(autouse=True)
def reap_workers():
    yield
    reap()


@pytest.fixture(scope="package")
def browser():
    """Headless Chromium for the dashboard's tests (tests/acceptance/ui.py)."""
    from tests.acceptance import ui

    with ui.sync_api.sync_playwright() as p:
        chromium = ui.launch(p)
        yield chromium
        chromium.close()
