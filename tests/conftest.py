"""Shared fixtures: a real MariaDB (private via pytest-mysql, or one named by a DSN), one
migrated database for the session, and per-test tenants so tests never share rows.

``ORBIT_TEST_MYSQL_DSN=mysql://user:pw@host:port/db`` uses an existing server (``mysql_noproc``);
otherwise ``mysql_proc`` starts a private server (own data dir and port) with the binaries that
``devtools.localdb`` finds or installs.
"""

from __future__ import annotations

import argparse
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pymysql
import pytest
from falcon import testing
from pytest_mysql import factories

from devtools import localdb
from orbit_shell.cli.admin import bootstrap
from orbit_shell.engine import schema
from orbit_shell.engine.db import Database
from orbit_shell.engine.db import connect as db_connect
from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from tests.engine import Engine

EXTERNAL_DSN = os.environ.get("ORBIT_TEST_MYSQL_DSN")

if EXTERNAL_DSN:
    _url = urlparse(EXTERNAL_DSN)
    mysql_server = factories.mysql_noproc(
        host=_url.hostname, port=_url.port or 3306, user=_url.username or "root"
    )
else:
    _bin = localdb.isolated_binaries(
        localdb.ensure_binaries(), Path(__file__).resolve().parent.parent / ".scratch" / "bin"
    )
    mysql_server = factories.mysql_proc(
        mysqld_exec=_bin.mysqld,
        mysqld_safe=_bin.mysqld_safe,
        install_db=_bin.install_db,
        admin_executable=_bin.admin,
        params=" ".join(localdb.SERVER_OPTIONS),
    )


@dataclass
class ServerInfo:
    """Where the test server is and how to build DSNs for databases on it."""

    host: str
    port: int
    user: str
    password: str
    socket: str | None

    def dsn(self, database: str) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        tail = f"?unix_socket={self.socket}" if self.socket else ""
        return f"mysql://{auth}@{self.host}:{self.port}/{database}{tail}"

    def root(self) -> pymysql.connections.Connection:
        kwargs = dict(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            autocommit=True,
            charset="utf8mb4",
        )
        if self.socket:
            kwargs["unix_socket"] = self.socket
        return pymysql.connect(**kwargs)

    def create_database(self, name: str) -> str:
        with self.root() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        with self.root() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def server(request) -> ServerInfo:
    proc = request.getfixturevalue("mysql_server")
    if EXTERNAL_DSN:
        url = urlparse(EXTERNAL_DSN)
        return ServerInfo(
            url.hostname or "127.0.0.1",
            url.port or 3306,
            url.username or "root",
            url.password or "",
            None,
        )
    return ServerInfo("localhost", proc.port, proc.user, "", proc.unixsocket)


@pytest.fixture(scope="session")
def orbit_dsn(server: ServerInfo, request) -> str:
    """One database for the session, migrated and with routines installed."""
    name = request.config.getini("mysql_dbname") or "orbit_test"
    dsn = server.create_database(name)
    schema.apply(dsn)
    yield dsn
    server.drop_database(name)


@pytest.fixture
def fresh_dsn(server: ServerInfo):
    """A new empty database (for migration tests), dropped afterwards."""
    name = "orbit_mig_" + secrets.token_hex(4)
    yield server.create_database(name)
    server.drop_database(name)


@pytest.fixture(scope="session")
def database(orbit_dsn: str) -> Database:
    db = Database(orbit_dsn)
    yield db
    db.close()


@pytest.fixture(scope="session")
def app(orbit_dsn: str, database: Database):
    return create_app(Config(dsn=orbit_dsn), database=database)


@pytest.fixture
def client(app) -> testing.TestClient:
    return testing.TestClient(app)


@dataclass
class Tenant:
    """A freshly bootstrapped application/namespace with one queue and a full credential."""

    token: str
    queue_id: str
    application: str
    namespace: str
    namespace_id: int
    application_id: int

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def make_tenant(database: Database, tmp_path, worker_access: bool = True, **names) -> Tenant:
    app_name = names.get("application") or "app-" + secrets.token_hex(6)
    ns_name = names.get("namespace") or "ns"
    out = tmp_path / f"cred-{secrets.token_hex(4)}.json"
    doc = bootstrap(
        database,
        argparse.Namespace(
            application=app_name,
            environment=names.get("environment", "test"),
            namespace=ns_name,
            queue=names.get("queue", "default"),
            worker_access=worker_access,
            output=str(out),
        ),
    )
    [row] = database.query(
        "SELECT n.id AS ns, n.application_id AS app FROM namespaces n JOIN applications a "
        "ON a.id = n.application_id JOIN environments e ON e.id = n.environment_id "
        "WHERE a.name = %s AND e.name = %s AND n.name = %s",
        (app_name, names.get("environment", "test"), ns_name),
    )
    return Tenant(doc["token"], doc["queue_id"], app_name, ns_name, row["ns"], row["app"])


@pytest.fixture
def tenant(database: Database, tmp_path) -> Tenant:
    return make_tenant(database, tmp_path)


@pytest.fixture
def tenant_factory(database: Database, tmp_path):
    return lambda **kw: make_tenant(database, tmp_path, **kw)


@pytest.fixture
def eng(database: Database, tenant: Tenant):
    """The test tenant's procedures, called as the tests of the engine call them."""
    return Engine(database, tenant)


LAST_EPOCH = 2**24 - 1


@pytest.fixture
def last_epoch(database: Database):
    """The database in its last token epoch (H1), where a key's tokens end at the unsigned
    64-bit maximum (K7); epoch 0 again afterwards, for the tests that follow."""
    set_epoch(database, LAST_EPOCH)
    yield LAST_EPOCH
    set_epoch(database, 0)


def set_epoch(database: Database, epoch: int) -> None:
    """What orbit-admin promote writes when it raises the epoch (a statement, as it does)."""
    conn = db_connect(database.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE token_epoch SET epoch = %s WHERE id = 1", (epoch,))
    finally:
        conn.close()
