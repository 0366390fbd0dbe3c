"""Acceptance fixtures: the real `orbit` server (gunicorn) as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

from orbit_shell import localdb
from tests.acceptance.procs import reap


def script(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


@pytest.fixture(scope="session")
def orbit_server(orbit_process):
    """The base URL of the session's `orbit` server."""
    return orbit_process.url


@pytest.fixture(scope="session")
def orbit_process(orbit_dsn, tmp_path_factory):
    """`orbit` on a free port against the session database; yields the Popen (with .url)."""
    port = localdb.free_port()
    log = tmp_path_factory.mktemp("orbit") / "server.log"
    env = dict(
        os.environ,
        ORBIT_MYSQL_DSN=orbit_dsn,
        ORBIT_HTTP_ADDR=f"127.0.0.1:{port}",
        ORBIT_HTTP_WORKERS="2",
        ORBIT_SWEEP_INTERVAL="0.5",
    )
    with open(log, "w") as out:
        proc = subprocess.Popen([script("orbit")], env=env, stdout=out, stderr=out)
    url = proc.url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("orbit did not start:\n" + log.read_text()) from None
            time.sleep(0.2)
    yield proc
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(autouse=True)
def reap_workers():
    yield
    reap()
