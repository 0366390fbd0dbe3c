"""The purge gauges of `/metrics` (orbit_shell.server.dbmetrics): a transaction left open on
the server keeps purge from removing what every claim steps over, and operators alert on
these two."""

from __future__ import annotations

import logging
import re
import secrets
import time

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.server.dbmetrics import PurgeCollector


def gauge(text: str, name: str) -> float | None:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def test_metrics_report_the_history_length_and_an_open_transaction_s_age(client, orbit_dsn):
    assert gauge(client.simulate_get("/metrics").text, "orbit_db_history_list_length") >= 0
    view = db.connect(orbit_dsn)
    try:
        with view.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        time.sleep(1.2)
        text = client.simulate_get("/metrics").text
    finally:
        view.close()
    assert gauge(text, "orbit_db_oldest_transaction_seconds") >= 1.0
    assert gauge(text, "orbit_db_history_list_length") >= 0


def test_an_account_without_process_has_no_purge_gauges_and_is_told_once(server, orbit_dsn, caplog):
    """Without the PROCESS privilege the gauges are left out (not reported as 0, which would
    read as healthy) and the server says once what to grant."""
    name, password = "orbit_np_" + secrets.token_hex(3), secrets.token_hex(12)
    schema_name = db.parse_dsn(orbit_dsn)["database"]
    with server.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'localhost' IDENTIFIED BY %s", (name, password))
        cur.execute(f"GRANT SELECT, EXECUTE ON `{schema_name}`.* TO %s@'localhost'", (name,))
    suffix = f"?unix_socket={server.socket}" if server.socket else ""
    database = Database(
        f"mysql://{name}:{password}@{server.host}:{server.port}/{schema_name}{suffix}", pool_size=1
    )
    try:
        collector = PurgeCollector(database)
        with caplog.at_level(logging.WARNING, logger="orbit.metrics"):
            assert list(collector.collect()) == []
            assert list(collector.collect()) == []
        assert caplog.text.count("grant it PROCESS") == 1
        assert [m.name for m in PurgeCollector(Database(orbit_dsn, pool_size=1)).collect()] == [
            "orbit_db_history_list_length",
            "orbit_db_oldest_transaction_seconds",
        ]
    finally:
        database.close()
        with server.root() as conn, conn.cursor() as cur:
            cur.execute("DROP USER %s@'localhost'", (name,))


def test_an_unreachable_database_leaves_the_gauges_out_of_that_scrape():
    collector = PurgeCollector(Database("mysql://root@127.0.0.1:1/nothing", pool_size=1))
    assert list(collector.collect()) == []
    assert not collector.refused  # asked again at the next scrape
