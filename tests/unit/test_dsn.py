"""DSN parsing: TLS is asked for explicitly, never left to the driver's preference."""

from __future__ import annotations

import pytest

from orbit_shell.engine.db import parse_dsn


def test_plain_unless_a_ca_is_named():
    settings = parse_dsn("mysql://u:p%40ss@db.example:3307/orbit?unix_socket=/run/m.sock")
    assert settings == {
        "host": "db.example",
        "port": 3307,
        "user": "u",
        "password": "p@ss",
        "database": "orbit",
        "unix_socket": "/run/m.sock",
        "ssl_disabled": True,
    }


def test_a_named_ca_requires_verified_tls():
    settings = parse_dsn("mysql://u@db.example/orbit?ssl_ca=/etc/orbit/ca.pem")
    assert settings["ssl_ca"] == "/etc/orbit/ca.pem"
    assert settings["ssl_verify_cert"] is True
    assert "ssl_disabled" not in settings


@pytest.mark.parametrize("dsn", ["postgres://u@h/db", "mysql://u@h", "mysql://u@h/"])
def test_not_a_mysql_dsn_with_a_database(dsn):
    with pytest.raises(ValueError):
        parse_dsn(dsn)
