"""The commands as a user runs them: `orbit --help` and `--version` without a database, and
`orbit-worker MODULE:ATTR` running a module's handlers against the real server until SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest
from tests.acceptance.conftest import script

MODULE = textwrap.dedent(
    """
    from orbit_shell.sdk.worker import Worker

    worker = Worker(capacity=2, wait_ms=300)

    @worker.handler("greet", "v1")
    def greet(event):
        return {"hello": event.payload["name"]}

    @worker.handler("boom", "v1")
    def boom(event):
        raise ValueError("no such thing")
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    return {**env, **extra}


def test_orbit_help_and_version_need_no_database():
    shown = subprocess.run(
        [script("orbit"), "--help"], env=_env(), capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 0, shown.stderr
    assert "ORBIT_MYSQL_DSN" in shown.stdout and "ORBIT_LONGPOLL_PER_CREDENTIAL" in shown.stdout
    said = subprocess.run(
        [script("orbit"), "--version"], env=_env(), capture_output=True, text=True, timeout=30
    )
    assert said.returncode == 0 and said.stdout.startswith("orbit 0.")


def test_orbit_worker_runs_a_module_s_handlers_and_drains_on_sigterm(
    orbit_server, tenant, tmp_path
):
    (tmp_path / "mytasks.py").write_text(MODULE)
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"token": tenant.token, "queue_id": tenant.queue_id}))
    api = Client(orbit_server, tenant.token)
    ids = {
        handler: api.submit_task(
            f"cmd-{handler}",
            SubmitTaskRequest(
                queue_id=tenant.queue_id,
                handler=handler,
                handler_version="v1",
                payload_version="v1",
                payload={"name": "orbit"},
            ),
        ).task.task_id
        for handler in ("greet", "boom")
    }
    proc = subprocess.Popen(
        [script("orbit-worker"), "mytasks:worker"],
        cwd=tmp_path,
        env=_env(ORBIT_URL=orbit_server, ORBIT_CREDENTIALS_FILE=str(creds)),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            states = {h: api.get_task(t).state for h, t in ids.items()}
            if states == {"greet": "SUCCEEDED", "boom": "FAILED"}:
                break
            time.sleep(0.1)
        assert states == {"greet": "SUCCEEDED", "boom": "FAILED"}
        assert api.get_task(ids["greet"]).result == {"hello": "orbit"}
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        api.close()
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    outcomes = [r for r in lines if r.get("action") == "worker.result" and r["level"] == "info"]
    assert sorted(r["msg"] for r in outcomes) == ["reported failed", "reported succeeded"]
    assert {r["task_id"] for r in outcomes} == set(ids.values())
    assert any(r["msg"] == "drained" for r in lines)


def test_orbit_worker_says_what_is_missing(tmp_path):
    (tmp_path / "mytasks.py").write_text(MODULE)
    (tmp_path / "creds.json").write_text("token: orb_x\n")
    server = ["--url", "http://127.0.0.1:9"]
    for args, says in (
        (["mytasks"], "give MODULE:ATTRIBUTE"),
        (["mytasks:nothing"], "is not an orbit_shell.sdk.worker.Worker"),
        (["mytasks:worker"], "where is the server?"),
        (
            ["mytasks:worker", *server, "--credentials", "creds.json"],
            "creds.json: not an Orbit credentials file (not JSON",
        ),
    ):
        done = subprocess.run(
            [script("orbit-worker"), *args],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2 and says in done.stderr, (args, done.stderr)
