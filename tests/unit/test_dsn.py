"""DSN parsing: TLS is asked for explicitly, never left to the driver's preference."""

from __future__ import annotations

import pytest

from orbit_shell.engine import db, dberrors
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


def test_h3_a_dsn_may_list_several_servers_with_one_account_and_database():
    servers = db.parse_servers("mysql://orbit:s%40cret@10.0.0.1:3306,10.0.0.2:3307,db3/orbit")
    assert [(s["host"], s["port"]) for s in servers] == [
        ("10.0.0.1", 3306),
        ("10.0.0.2", 3307),
        ("db3", 3306),
    ]
    assert {(s["user"], s["password"], s["database"]) for s in servers} == {
        ("orbit", "s@cret", "orbit")
    }
    assert db.parse_dsn("mysql://u@a:1,b:2/orbit")["host"] == "a"
    assert len(db.parse_servers("mysql://u@a:1/orbit")) == 1
    with pytest.raises(ValueError):
        db.parse_servers("mysql://u@a:1,b:2/orbit?unix_socket=/tmp/s")


def test_h3_a_single_server_dsn_is_its_own_primary():
    dsn = "mysql://u:p@h:3307/orbit?ssl_ca=/ca.pem"
    assert db.primary_dsn(dsn) == dsn


def test_h3_a_server_that_takes_no_writes_is_a_switch_503_with_retry_after():
    import pymysql

    from orbit_shell import errors

    for code in (1290, 1836):
        mapped = dberrors.map_error(pymysql.err.OperationalError(code, "read-only"))
        assert isinstance(mapped, errors.Unavailable) and mapped.retry_after == 1
        assert dberrors.switching(pymysql.err.OperationalError(code, "read-only"))
    assert not dberrors.switching(pymysql.err.OperationalError(1062, "duplicate"))
