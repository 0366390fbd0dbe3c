"""The private-database module's decisions that do not need a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbit_shell import localdb


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
