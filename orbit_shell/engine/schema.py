"""Schema management: yoyo migrations, routine installation and the version check.

Migrations (``sql/migrations``) are plain DDL/DML applied by yoyo. Routines (``sql/procedures``,
one per file, file stem = routine name) are (re)installed after every ``up``, because yoyo runs
hooks only when a migration was pending. The digest of the installed routine files is kept in
``orbit_meta`` so a server can refuse a database whose schema or routines are not the ones it
ships (K11).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pymysql

from orbit_shell.engine import db

SQL_DIR = Path(os.environ.get("ORBIT_SQL_DIR", Path(__file__).resolve().parents[2] / "sql"))
MIGRATIONS_DIR = SQL_DIR / "migrations"
PROCEDURES_DIR = SQL_DIR / "procedures"
ROUTINE_RE = re.compile(r"^\s*CREATE\s+(PROCEDURE|FUNCTION)\s+`?(\w+)`?", re.I | re.M)


class SchemaMismatch(RuntimeError):
    """The database schema is not the version this code expects."""


@dataclass(frozen=True)
class Routine:
    name: str
    kind: str  # PROCEDURE or FUNCTION
    body: str


def migration_ids() -> list[str]:
    """Ids of the migrations this code ships, in order."""
    _require_sql_dir()
    return sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))


def _require_sql_dir() -> None:
    """Refuse to go on without the SQL files: an empty list of migrations would make every
    check pass against any database."""
    if not any(MIGRATIONS_DIR.glob("*.sql")) or not any(PROCEDURES_DIR.glob("*.sql")):
        raise SchemaMismatch(f"no migrations or routines under {SQL_DIR} (ORBIT_SQL_DIR)")


@functools.cache
def routines() -> tuple[Routine, ...]:
    """The routines in ``sql/procedures``; each file must hold one routine named like the file.

    Read once per process: the files do not change under a running server, and ``check`` runs
    on every ``/readyz``.
    """
    _require_sql_dir()
    found = []
    for path in sorted(PROCEDURES_DIR.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        matches = ROUTINE_RE.findall(text)
        if len(matches) != 1 or matches[0][1] != path.stem:
            raise SchemaMismatch(f"{path} must hold exactly one routine named {path.stem}")
        found.append(Routine(path.stem, matches[0][0].upper(), text))
    return tuple(found)


@functools.cache
def routines_digest() -> str:
    """SHA-256 over every routine file (name and text), the routine-set version."""
    digest = hashlib.sha256()
    for routine in routines():
        digest.update(routine.name.encode() + b"\0" + routine.body.encode() + b"\0")
    return digest.hexdigest()


@contextlib.contextmanager
def _backend(dsn: str):
    """A yoyo backend whose connection is closed afterwards (an open one holds metadata locks
    that block DROP DATABASE and DDL from other sessions)."""
    from yoyo import get_backend

    backend = get_backend(db.primary_dsn(dsn))
    try:
        yield backend
    finally:
        backend.connection.close()


def _migrations():
    from yoyo import read_migrations

    _require_sql_dir()
    return read_migrations(str(MIGRATIONS_DIR))


def status(dsn: str) -> list[tuple[str, bool]]:
    """Return ``(migration id, applied?)`` for every shipped migration."""
    with _backend(dsn) as backend:
        return [(m.id, backend.is_applied(m)) for m in _migrations()]


def apply(dsn: str, until: str | None = None, install: bool = True) -> list[str]:
    """Apply pending migrations (up to and including ``until``), then install the routines.

    Returns:
        The ids of the migrations applied by this call.
    """
    migrations = _migrations()
    if until is not None:
        migrations = migrations.filter(lambda m: m.id <= until)
    with _backend(dsn) as backend, backend.lock():
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
    if install:
        install_routines(dsn)
    return [m.id for m in pending]


def install_routines(dsn: str) -> int:
    """Drop and re-create every routine, then record the digest; harmless to repeat.

    A routine runs under the ``sql_mode`` it was created with: the connection's, which
    :func:`db.connect` sets to :data:`db.SQL_MODE` whatever the server's default.
    """
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            for routine in routines():
                cur.execute(f"DROP {routine.kind} IF EXISTS `{routine.name}`")
                cur.execute(routine.body)
            cur.execute(
                "INSERT INTO orbit_meta (meta_key, meta_value, updated_at) "
                "VALUES ('routines_digest', %s, UTC_TIMESTAMP(6)) "
                "ON DUPLICATE KEY UPDATE meta_value = VALUES(meta_value), "
                "updated_at = VALUES(updated_at)",
                (routines_digest(),),
            )
        return len(routines())
    finally:
        conn.close()


def check(dsn: str) -> None:
    """Raise SchemaMismatch unless the database is exactly at the version this code ships.

    Raises:
        SchemaMismatch: with a message that says whether the database is older or newer.
    """
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT migration_id FROM _yoyo_migration")
                applied = {row["migration_id"] for row in cur.fetchall()}
                cur.execute("SELECT meta_value FROM orbit_meta WHERE meta_key = 'routines_digest'")
                row = cur.fetchone()
            except pymysql.err.ProgrammingError as exc:
                raise SchemaMismatch(
                    "database has no Orbit schema; run `orbit-migrate up`"
                ) from exc
    finally:
        conn.close()
    expected = set(migration_ids())
    if applied - expected:
        raise SchemaMismatch(
            "database schema is newer than this server (unknown migrations: "
            + ", ".join(sorted(applied - expected))
            + "); upgrade the server"
        )
    if expected - applied:
        raise SchemaMismatch(
            "database schema is older than this server (pending migrations: "
            + ", ".join(sorted(expected - applied))
            + "); run `orbit-migrate up`"
        )
    if row is None or row["meta_value"] != routines_digest():
        raise SchemaMismatch(
            "installed routines differ from this server's; run `orbit-migrate up` with this version"
        )


SNAPSHOT = SQL_DIR / "schema.sql"
# yoyo's own bookkeeping tables: not Orbit's schema.
_YOYO_TABLES = re.compile(r"^_yoyo_|^yoyo_lock$")


def snapshot(dsn: str) -> str:
    """The database's tables as ``CREATE TABLE`` statements, in name order: what
    ``sql/schema.sql`` holds for a database built by the migrations (tables, columns,
    indexes and comments; no data, no counters that change with use)."""
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES")
            names = sorted(
                name for row in cur.fetchall() for name in row.values()
                if not _YOYO_TABLES.search(name)
            )  # fmt: skip
            statements = []
            for name in names:
                cur.execute(f"SHOW CREATE TABLE `{name}`")
                text = cur.fetchone()["Create Table"]
                statements.append(re.sub(r" AUTO_INCREMENT=\d+", "", text) + ";\n")
    finally:
        conn.close()
    head = (
        "-- The current schema, generated from a database built by sql/migrations with\n"
        "-- `orbit-migrate snapshot > sql/schema.sql` (MariaDB's SHOW CREATE TABLE). Read it;\n"
        "-- never apply it: migrations make databases. tests/migration checks it is current.\n\n"
    )
    return head + "\n".join(statements)
