"""End to end through gunicorn and real processes: the SPEC 7 example, and a worker killed
with SIGKILL mid-task whose late write is rejected by the fenced store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.fence import SqlFencedStore, StaleTokenError
from orbit_shell.sdk.models import SubmitTaskRequest
from tests.acceptance.procs import read_line, spawn

ROOT = Path(__file__).resolve().parents[2]


def _credentials(tenant, tmp_path) -> Path:
    path = tmp_path / "creds.json"
    path.write_text(
        json.dumps(
            {"token": tenant.token, "queue_id": tenant.queue_id, "namespace": tenant.namespace}
        )
    )
    return path


def test_example_prints_the_two_lines(orbit_server, tenant, tmp_path):
    env = dict(
        os.environ,
        ORBIT_URL=orbit_server,
        ORBIT_CREDENTIALS_FILE=str(_credentials(tenant, tmp_path)),
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "keyed_concurrency.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "queues=2 completed=2 tokens_increasing=true\n"
        "resource_writes=2 stale_write_rejected=true worker_drained=true\n"
    )


def test_example_fails_fast_and_nonzero_when_the_server_is_gone(tenant, tmp_path):
    env = dict(
        os.environ,
        ORBIT_URL="http://127.0.0.1:1",
        ORBIT_CREDENTIALS_FILE=str(_credentials(tenant, tmp_path)),
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "keyed_concurrency.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert time.monotonic() - started < 21


@pytest.fixture
def fence_dsn(server):
    dsn = server.create_database("fence_e2e")
    yield dsn
    server.drop_database("fence_e2e")


def test_sigkill_mid_task_recovered_with_a_larger_token_and_the_late_write_rejected(
    orbit_server, tenant, fence_dsn
):
    store = SqlFencedStore(fence_dsn, tenant.namespace)
    store.ensure_schema()
    client = Client(orbit_server, tenant.token)
    queue = client.create_queue("kill-test", lease_seconds=2)
    key = "object/killed"
    task = client.submit_task(
        "kill-1",
        SubmitTaskRequest(
            queue_id=queue.queue_id,
            handler="object.update",
            handler_version="v1",
            payload_version="v1",
            payload={},
            concurrency_key=key,
        ),
    ).task

    first = spawn(orbit_server, tenant, queue.queue_id, fence_dsn, sleep=60, value="old")
    _, old_attempt, old_token = read_line(first, "started").split()[:3]
    first.send_signal(signal.SIGKILL)  # mid-task: started, nothing written yet
    first.wait(10)

    deadline = time.monotonic() + 15  # lease 2 s, sweeper every 0.5 s
    while client.get_task(task.task_id).state != "NEEDS_REVIEW":
        assert time.monotonic() < deadline, client.get_task(task.task_id).state
        time.sleep(0.2)
    client.resolve_task(task.task_id, "WAITING", note="holder was killed; effect checked: none")

    second = spawn(orbit_server, tenant, queue.queue_id, fence_dsn, sleep=0, value="new")
    try:
        _, new_attempt, new_token = read_line(second, "wrote").split()[:3]
        assert int(new_token) > int(old_token)
        deadline = time.monotonic() + 10
        while client.get_task(task.task_id).state != "SUCCEEDED":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0
    assert read_line(second, "drained=") == "drained=True"

    # The killed holder's request arrives late at the resource: the token fences it off.
    with pytest.raises(StaleTokenError):
        store.write(tenant.namespace, key, int(old_token), task.task_id + "-late", "old")
    assert store.state(key) == {"highest_token": int(new_token), "value": "new"}
    attempts = client.list_attempts(task.task_id)
    assert [(a.attempt_id, a.state, a.concurrency_token) for a in attempts] == [
        (old_attempt, "UNKNOWN", int(old_token)),
        (new_attempt, "SUCCEEDED", int(new_token)),
    ]
