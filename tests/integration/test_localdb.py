"""The private-database module: its decisions, and the environment a server starts with."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import localdb
from orbit_shell.engine import db


def test_missing_server_without_root_says_what_to_install(monkeypatch):
    monkeypatch.setattr(localdb, "find_binaries", lambda: None)
    monkeypatch.setattr(localdb.os, "geteuid", lambda: 1000)
    with pytest.raises(localdb.LocalDbError) as info:
        localdb.ensure_binaries()
    assert "apt-get install -y mariadb-server" in str(info.value)
    assert "ORBIT_MYSQL_DSN" in str(info.value)


def test_isolated_wrappers_pass_no_defaults_first(tmp_path):
    found = localdb.find_binaries()
    if found is None:
        pytest.skip("no MariaDB binaries on this machine")  # never the case after scripts/test
    wrapped = localdb.isolated_binaries(found, tmp_path)
    for path in (wrapped.mysqld_safe, wrapped.install_db):
        text = Path(path).read_text()
        assert '--no-defaults "$@"' in text and text.startswith("#!/bin/sh")


def test_private_server_runs_with_the_environment_it_is_given(tmp_path):
    """The benchmark's emulated slow disk preloads a library into mariadbd this way
    (bench/slowdisk.py); the server must start with the variables and still serve."""
    found = localdb.find_binaries()
    if found is None:
        pytest.skip("no MariaDB binaries on this machine")  # never the case after scripts/test
    server = localdb.PrivateServer(
        tmp_path / "db", found, environment={"ORBIT_TEST_MARK": "private-server-env"}
    )
    dsn = server.start()
    try:
        pid = int(server.pidfile.read_text())
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"ORBIT_TEST_MARK=private-server-env" in environ
        conn = db.connect(dsn)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 AS one")
                assert cur.fetchone() == {"one": 1}
        finally:
            conn.close()
    finally:
        server.stop()
