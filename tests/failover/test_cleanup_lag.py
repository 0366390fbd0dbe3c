"""R4 on a replicated database: the cleanup waits between batches while a replica the DSN lists
is behind, and goes at its own pace once it has caught up."""

from __future__ import annotations

import os
import secrets
import subprocess
import time

from orbit_shell.engine import db
from orbit_shell.server import cleanup
from tests.acceptance.conftest import script
from tests.failover.cluster import Cluster


def _idle_keys(database: db.Database, namespace_id: int, count: int) -> None:
    """Key rows nobody has held for a day: each one a batch of ``keys_reclaim`` at batch 1."""
    with database.connection() as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, "
            "holder_attempt_id, created_at, updated_at) VALUES (%s, %s, 1, NULL, "
            "UTC_TIMESTAMP(6) - INTERVAL 1 DAY, UTC_TIMESTAMP(6) - INTERVAL 1 DAY)",
            [(namespace_id, f"idle-{secrets.token_hex(6)}") for _ in range(count)],
        )


def _lag(server: dict, at_least: float, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        lag = db.replica_lag(server)
        if lag is not None and lag >= at_least:
            return lag
        assert time.monotonic() < deadline, f"the replica's lag stayed at {lag}"
        time.sleep(0.2)


def test_r4_a_pass_waits_while_a_replica_is_behind(tmp_path, monkeypatch):
    cluster = Cluster(tmp_path / "cluster", size=2, semi_sync=False)
    cluster.start()
    database = db.Database(cluster.app_dsn())
    held = None
    try:
        env = dict(os.environ, ORBIT_MYSQL_DSN=cluster.app_dsn())
        subprocess.run([script("orbit-migrate"), "up"], env=env, check=True, capture_output=True)
        subprocess.run(
            [script("orbit-admin"), "bootstrap", "--application", "lag", "--namespace", "ns"]
            + ["--environment", "test", "--queue", "q", "--output", str(tmp_path / "creds.json")],
            env=env,
            check=True,
            capture_output=True,
        )
        [[ns]] = [database.query("SELECT id FROM namespaces")]
        database.call("namespace_retention", ns["id"], None, 0)
        [replica] = database.replicas()
        assert db.replica_lag(replica) == 0.0

        # The replica stops applying (a global read lock held), the primary writes on.
        held = cluster.nodes[1].admin()
        with held.cursor() as cur:
            cur.execute("FLUSH TABLES WITH READ LOCK")
        _idle_keys(database, ns["id"], 3)
        _lag(replica, 2.0)
        monkeypatch.setattr(cleanup, "LAG_LIMIT", 1.0)
        sleeps: list[float] = []
        deleted = cleanup.run_pass(database, ns["id"], batch=1, sleep=sleeps.append)
        assert deleted["concurrency_resources"] == 3
        assert sleeps.count(cleanup.BACKOFF) == 3, sleeps

        held.close()
        held = None
        cluster.wait_replicas()
        assert db.replica_lag(replica) == 0.0
        _idle_keys(database, ns["id"], 3)
        sleeps.clear()
        assert (
            cleanup.run_pass(database, ns["id"], batch=1, sleep=sleeps.append)[
                "concurrency_resources"
            ]
            == 3
        )
        assert sleeps and cleanup.BACKOFF not in sleeps, sleeps
    finally:
        if held is not None:
            held.close()
        database.close()
        cluster.stop()


def test_r4_a_replica_that_cannot_say_holds_nothing_back(tmp_path):
    """Without SLAVE MONITOR, or with replication stopped, the lag is unknown (None), and the
    pass paces by the primary's history list alone."""
    cluster = Cluster(tmp_path / "cluster", size=2, semi_sync=False)
    cluster.start()
    try:
        replica = db.parse_servers(cluster.app_dsn())[1]
        assert db.replica_lag(replica) == 0.0
        cluster.nodes[1].sql("STOP SLAVE SQL_THREAD")
        assert db.replica_lag(replica) is None
        cluster.nodes[1].sql("START SLAVE SQL_THREAD")
        for host in ("127.0.0.1", "localhost"):
            cluster.nodes[1].sql(
                "SET sql_log_bin = 0", f"REVOKE SLAVE MONITOR ON *.* FROM 'orbit'@'{host}'"
            )
        assert db.replica_lag(replica) is None
    finally:
        cluster.stop()
