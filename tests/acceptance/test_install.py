"""A plain install, as a user makes it: a clean virtualenv, ``pip install`` of the package
without extras, then ``orbit --version``, ``orbit`` serving against the test database and one
task run by ``orbit-worker``. The README's commands install the test extras, which hid a
missing dependency of gunicorn's gevent worker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devtools import localdb
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest
from tests.acceptance.conftest import stop_orbit
from tests.acceptance.test_commands import MODULE, _env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("plain") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # A copy of the tree: pip builds in place, and the checkout stays as it is.
    source = tmp_path_factory.mktemp("source")
    subprocess.run(
        f"git -C {ROOT} ls-files -z --cached --others --exclude-standard "
        f"| xargs -0 cp --parents -t {source}",
        shell=True,
        check=True,
        cwd=ROOT,
    )
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-4000:]
    return venv


def test_a_plain_install_serves_and_runs_a_task(plain_venv, orbit_dsn, tenant, tmp_path):
    bin_ = plain_venv / "bin"
    said = subprocess.run(
        [str(bin_ / "orbit"), "--version"], env=_env(), capture_output=True, text=True
    )
    assert said.returncode == 0 and said.stdout.startswith("orbit 0."), said.stderr
    shown = subprocess.run(
        [str(bin_ / "python"), "-c", "import orbit_shell.sdk.client, orbit_shell.sdk.worker"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    port = localdb.free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "orbit.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [str(bin_ / "orbit")],
            env=_env(
                ORBIT_MYSQL_DSN=orbit_dsn,
                ORBIT_HTTP_ADDR=f"127.0.0.1:{port}",
                ORBIT_HTTP_WORKERS="1",
            ),
            stdout=out,
            stderr=out,
            cwd=tmp_path,  # nothing of the checkout on its path
        )
    worker = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        (tmp_path / "mytasks.py").write_text(MODULE)
        creds = tmp_path / "creds.json"
        creds.write_text(json.dumps({"token": tenant.token, "queue_id": tenant.queue_id}))
        api = Client(url, tenant.token)
        task = api.submit_task(
            "plain-install",
            SubmitTaskRequest(
                queue_id=tenant.queue_id,
                handler="greet",
                handler_version="v1",
                payload_version="v1",
                payload={"name": "plain"},
            ),
        ).task.task_id
        worker = subprocess.Popen(
            [str(bin_ / "orbit-worker"), "mytasks:worker"],
            cwd=tmp_path,
            env=_env(ORBIT_URL=url, ORBIT_CREDENTIALS_FILE=str(creds)),
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while (state := api.get_task(task).state) != "SUCCEEDED":
            assert worker.poll() is None and time.monotonic() < deadline, state
            time.sleep(0.2)
        assert api.get_task(task).result == {"hello": "plain"}
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(30)
        stop_orbit(server)
