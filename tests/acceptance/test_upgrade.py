"""Upgrades without failed requests (H5): `orbit-migrate up` of another routine version while a
real server takes submissions and a worker claims and reports through it. The new version is
installed beside the running one, so the server's calls never meet a missing routine: no 5xx,
and every acknowledged task settles."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import threading
import time
from collections import Counter

import requests

from orbit_shell.engine import schema
from tests.acceptance.conftest import script
from tests.helpers import task_body


def _new_version(tmp_path):
    """The SQL files with one routine's text changed: another routine version."""
    sql = tmp_path / "sql"
    shutil.copytree(schema.SQL_DIR, sql)
    routine = sql / "procedures" / "task_submit.sql"
    routine.write_text(routine.read_text() + "\n-- the next version\n")
    return sql


def test_h5_routines_of_a_new_version_install_under_load_without_a_5xx(
    orbit_server, tenant, orbit_dsn, tmp_path
):
    statuses: Counter[int] = Counter()
    acknowledged: list[str] = []
    stop = threading.Event()
    headers = {"Authorization": f"Bearer {tenant.token}"}

    def produce() -> None:
        http = requests.Session()
        while not stop.is_set():
            answer = http.post(
                orbit_server + "/v1/tasks",
                json=task_body(tenant.queue_id, concurrency_key=f"up/{len(acknowledged) % 4}"),
                headers={**headers, "Idempotency-Key": secrets.token_hex(8)},
                timeout=10,
            )
            statuses[answer.status_code] += 1
            if answer.status_code in (200, 201):
                acknowledged.append(answer.json()["data"]["task_id"])

    def consume() -> None:
        http = requests.Session()
        hello = http.post(
            orbit_server + "/v1/workers/hello",
            json={
                "worker_id": "upgrader",
                "queue_ids": [tenant.queue_id],
                "capacity": 8,
                "concurrency_keys": True,
            },
            headers=headers,
            timeout=10,
        ).json()["data"]
        session = hello["session_id"]
        while not stop.is_set() or len(done) < len(acknowledged):
            answer = http.post(
                orbit_server + f"/v1/workers/{session}/claim",
                json={"max": 8, "wait_ms": 200},
                headers=headers,
                timeout=10,
            )
            statuses[answer.status_code] += 1
            for a in answer.json().get("data", {}).get("assignments", []):
                for action, body in (("start", {}), ("result", {"outcome": "succeeded"})):
                    r = http.post(
                        orbit_server + f"/v1/attempts/{a['attempt_id']}/{action}",
                        json={"session_id": session, **body},
                        headers=headers,
                        timeout=10,
                    )
                    statuses[r.status_code] += 1
                done.add(a["task"]["task_id"])
            if stop.is_set() and time.monotonic() > deadline[0]:
                return

    done: set[str] = set()
    deadline = [float("inf")]
    threads = [threading.Thread(target=produce) for _ in range(3)]
    threads.append(threading.Thread(target=consume))
    for t in threads:
        t.start()
    env = dict(os.environ, ORBIT_MYSQL_DSN=orbit_dsn, ORBIT_SQL_DIR=str(_new_version(tmp_path)))
    try:
        time.sleep(1.0)
        for _ in range(2):  # a second run installs nothing more
            up = subprocess.run(
                [script("orbit-migrate"), "up"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert up.returncode == 0, up.stderr
            time.sleep(0.5)
        time.sleep(1.0)
    finally:
        stop.set()
        deadline[0] = time.monotonic() + 30
        for t in threads:
            t.join(60)
        # The session's other tests call the database's latest version: this code's again.
        schema.install_routines(orbit_dsn)
        schema.prune(orbit_dsn)
    print({"statuses": dict(statuses), "acknowledged": len(acknowledged), "done": len(done)})
    assert acknowledged and sum(statuses.values()) > 50
    assert not [s for s in statuses if s >= 500], statuses
    assert set(acknowledged) <= done
