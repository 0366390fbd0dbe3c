"""orbit-admin bootstrap (SPEC 7) and orbit-migrate, run as real console scripts."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from orbit_shell.engine import schema
from orbit_shell.server import auth


def _run(args, dsn, check=True):
    env = dict(os.environ, ORBIT_MYSQL_DSN=dsn)
    return subprocess.run(args, env=env, capture_output=True, text=True, check=check, timeout=120)


def _script(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def test_bootstrap_writes_a_private_file_and_stores_only_a_hash(orbit_dsn, database, tmp_path):
    out = tmp_path / "cred.json"
    args = [
        _script("orbit-admin"),
        "bootstrap",
        "--application",
        "boot-app",
        "--namespace",
        "ns",
        "--environment",
        "dev",
        "--queue",
        "first",
        "--worker-access",
        "--output",
        str(out),
    ]
    _run(args, orbit_dsn)
    doc = json.loads(out.read_text())
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert set(doc) >= {"token", "queue_id", "application", "environment", "namespace", "scopes"}
    assert doc["token"].startswith("orb_") and auth.TOKEN_RE.match(doc["token"])
    assert len(auth.TOKEN_RE.match(doc["token"]).group(2)) == 43  # 256 random bits, >= 128 required
    assert set(doc["scopes"]) == {
        "queues:manage",
        "tasks:submit",
        "tasks:read",
        "tasks:manage",
        "workers:connect",
        "workers:consume",
    }
    rows = database.query(
        "SELECT secret_sha256 FROM credentials WHERE public_id = %s", (doc["token"].split("_")[1],)
    )
    assert rows == [{"secret_sha256": auth.hash_token(doc["token"])}]
    # The raw token appears in no column of the credentials table.
    dump = database.query("SELECT * FROM credentials")
    assert doc["token"] not in json.dumps(dump, default=str)

    # Same names again: same tenant and queue, a new credential, no worker scopes this time.
    out2 = tmp_path / "cred2.json"
    _run(args[:-3] + ["--output", str(out2)], orbit_dsn)
    doc2 = json.loads(out2.read_text())
    assert doc2["queue_id"] == doc["queue_id"]
    assert doc2["token"] != doc["token"]
    assert "workers:consume" not in doc2["scopes"]
    assert database.query("SELECT COUNT(*) AS n FROM applications WHERE name = 'boot-app'") == [
        {"n": 1}
    ]


def test_migrate_status_and_up_are_console_scripts(fresh_dsn):
    status = _run([_script("orbit-migrate"), "status"], fresh_dsn).stdout
    assert status.count("pending") >= 5
    up = _run([_script("orbit-migrate"), "up"], fresh_dsn).stdout
    assert f"applied {len(schema.migration_ids())} migration(s)" in up
    again = _run([_script("orbit-migrate"), "up"], fresh_dsn).stdout
    assert "none pending" in again
    assert "pending" not in _run([_script("orbit-migrate"), "status"], fresh_dsn).stdout


def test_orbit_refuses_to_start_on_an_unmigrated_database(fresh_dsn):
    result = _run([_script("orbit")], fresh_dsn, check=False)
    assert result.returncode == 1
    assert "refusing to start" in result.stderr and "orbit-migrate up" in result.stderr


def test_missing_dsn_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ORBIT_MYSQL_DSN"}
    result = subprocess.run(
        [_script("orbit-migrate"), "up"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "ORBIT_MYSQL_DSN" in result.stderr
