"""H4: the background loops run once per database. Two `orbit` servers (two gunicorn workers
each) on one database: exactly one process leads; kill -9 that whole server and a worker of
the other takes over within a bounded time, and its sweeper then recovers expired leases."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

from orbit_shell.engine import schema
from orbit_shell.engine.db import Database
from tests.acceptance.conftest import launch_orbit, stop_orbit
from tests.conftest import make_tenant
from tests.engine import Engine

INTERVAL = "0.5"


def _leading(url: str) -> float:
    """What a scrape of the server says: 1 when one of its workers leads, else 0."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
            page = response.read().decode()
    except OSError:
        return 0.0
    found = re.search(r"^orbit_background_leader (\S+)$", page, re.M)
    return float(found.group(1)) if found else 0.0


def _wait_for(check, seconds: float) -> float | None:
    """Seconds until ``check()`` holds, or None if it did not within ``seconds``."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if check():
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def test_h4_one_leader_per_database_and_a_standby_takes_over(fresh_dsn, tmp_path):
    schema.apply(fresh_dsn)
    env = {"ORBIT_LEADER_INTERVAL": INTERVAL, "ORBIT_SWEEP_INTERVAL": INTERVAL}
    servers = [
        launch_orbit(fresh_dsn, tmp_path / f"{name}.log", new_session=True, **env)
        for name in ("a", "b")
    ]
    database = Database(fresh_dsn)
    try:
        assert _wait_for(lambda: sum(_leading(s.url) for s in servers) == 1, 10) is not None
        time.sleep(2 * float(INTERVAL))  # a second leader would have appeared by now
        leads = [_leading(s.url) for s in servers]
        assert sorted(leads) == [0.0, 1.0], leads  # one process of one server, not per worker
        leader, standby = (servers[0], servers[1]) if leads[0] else (servers[1], servers[0])
        # A lease that will need the sweeper once the leader is gone.
        eng = Engine(database, make_tenant(database, tmp_path))
        task = eng.submit("")
        session, _ = eng.hello(capacity=1)
        [granted] = eng.claim(session, 1)
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(10)
        took = _wait_for(lambda: _leading(standby.url) == 1.0, 15)
        print(
            f"\nH4: the standby server led {took and round(took, 2)} s after kill -9 of the leader"
        )
        assert took is not None
        eng.expire(granted["attempt_id"])
        assert _wait_for(lambda: eng.task(task)["state"] == "WAITING", 10) is not None
    finally:
        database.close()
        for server in servers:
            if server.poll() is None:
                stop_orbit(server)
