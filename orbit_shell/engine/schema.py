"""Schema management: yoyo migrations, versioned routine installation and the version check.

Migrations (``sql/migrations``) are plain DDL/DML applied by yoyo. Routines (``sql/procedures``,
one per file, file stem = routine name) are installed after every ``up`` under versioned names,
``<name>__<version>``, the version being the first 12 hex of the digest of all routine files;
a routine's calls to the others name the same version. Installing a new version adds routines
and drops none, so a server of the previous version keeps calling its own, unchanged, while
the new one is installed (H5); ``orbit-migrate prune`` drops the versions no server runs any
more. ``orbit_meta`` records the latest version installed (``routines_version``): a process
without the SQL files (a direct worker) calls that one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pymysql

from orbit_shell.engine import db

log = logging.getLogger("orbit.schema")
# An installed package carries its SQL as orbit_shell/sql (setup.py); a checkout, editable
# installs included, reads the repository's sql/.
_PACKAGED = Path(__file__).resolve().parents[1] / "sql"
SQL_DIR = Path(
    os.environ.get("ORBIT_SQL_DIR")
    or (_PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[2] / "sql")
)
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


def version() -> str:
    """This code's routine version: the digest's first 12 hex."""
    return routines_digest()[:12]


def code_version() -> str | None:
    """``version()``, or None where the SQL files are not at hand (an SDK-only install)."""
    try:
        return version()
    except SchemaMismatch:
        return None


VERSIONED_RE = re.compile(r"^(\w+)__([0-9a-f]{12})$")


def routine_name(name: str, at: str | None = None) -> str:
    """The installed name of routine ``name`` in version ``at`` (this code's by default)."""
    return f"{name}__{at or version()}"


@functools.cache
def _calls() -> re.Pattern:
    names = sorted((r.name for r in routines()), key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(names) + r")\b(?=\s*\()")


def versioned_body(routine: Routine) -> str:
    """The routine's text with its own name and every call of another routine versioned."""
    return _calls().sub(lambda m: routine_name(m.group(1)), routine.body)


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
    """Install this version's routines, those not installed yet, and record it as the latest;
    harmless to repeat, and never drops a routine (a running server may be calling it).

    A routine runs under the ``sql_mode`` it was created with: the connection's, which
    :func:`db.connect` sets to :data:`db.SQL_MODE` whatever the server's default.
    Returns the number of routines created now.
    """
    conn = db.connect(dsn)
    created = 0
    try:
        with conn.cursor() as cur:
            for routine in _missing(_installed(cur)):
                cur.execute(versioned_body(routine))
                created += 1
            _grant_new_version(cur)
            cur.execute(
                "INSERT INTO orbit_meta (meta_key, meta_value, updated_at) "
                "VALUES ('routines_version', %s, UTC_TIMESTAMP(6)) "
                "ON DUPLICATE KEY UPDATE meta_value = VALUES(meta_value), "
                "updated_at = VALUES(updated_at)",
                (version(),),
            )
        return created
    finally:
        conn.close()


def _grant_new_version(cur) -> None:
    """Give every account that may EXECUTE a routine of an earlier version (a direct worker
    account) the same routine of this version. Needs read access to ``mysql.procs_priv`` and
    the right to grant; without them ``orbit-admin worker-account`` grants it again."""
    try:
        cur.execute("SELECT User, Host, Routine_name FROM mysql.procs_priv WHERE Db = DATABASE()")
        rows = cur.fetchall()
        for row in rows:
            match = VERSIONED_RE.match(row["Routine_name"])
            if match and match.group(2) != version():
                cur.execute(
                    f"GRANT EXECUTE ON PROCEDURE `{routine_name(match.group(1))}` TO %s@%s",
                    (row["User"], row["Host"]),
                )
    except pymysql.MySQLError as exc:
        log.warning(
            "direct worker accounts not granted this version's routines (%s); run "
            "`orbit-admin worker-account` again for each",
            exc.args[-1],
        )


def _missing(present: set[str]) -> list[Routine]:
    """This version's routines whose versioned names are not among ``present``."""
    return [r for r in routines() if routine_name(r.name) not in present]


def _installed(cur) -> set[str]:
    cur.execute(
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()"
    )
    return {row["ROUTINE_NAME"] for row in cur.fetchall()}


def prune(dsn: str, keep: tuple[str, ...] = ()) -> list[str]:
    """Drop the routines of every version but this code's (and ``keep``), and those installed
    before routines were versioned; return the versions dropped. Run it once no server or
    direct worker of those versions runs (docs/operations.md, "Upgrades")."""
    kept = {version(), *keep}
    known = {r.name for r in routines()}
    conn = db.connect(dsn)
    dropped: set[str] = set()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT ROUTINE_NAME, ROUTINE_TYPE FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = DATABASE()"
            )
            for row in cur.fetchall():
                name = row["ROUTINE_NAME"]
                match = VERSIONED_RE.match(name)
                old = match.group(2) if match and match.group(2) not in kept else None
                if old or name in known:
                    cur.execute(f"DROP {row['ROUTINE_TYPE']} IF EXISTS `{name}`")
                    dropped.add(old or "unversioned")
    finally:
        conn.close()
    return sorted(dropped)


def check(dsn: str, timeout: float | None = None) -> None:
    """Raise SchemaMismatch unless this code can run on the database: every migration it
    ships applied, its routine version installed, and no migration it does not know unless its
    routines are installed (a rolling upgrade to a newer version). ``timeout``: seconds the
    connection may wait for the server at each step (db.IO_TIMEOUT when None).

    Raises:
        SchemaMismatch: with a message that says whether the database is older or newer.
    """
    waits = (
        {}
        if timeout is None
        else dict.fromkeys(("connect_timeout", "read_timeout", "write_timeout"), timeout)
    )
    conn = db.connect(dsn, **waits)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT migration_id FROM _yoyo_migration")
                applied = {row["migration_id"] for row in cur.fetchall()}
                present = _installed(cur)
            except pymysql.err.ProgrammingError as exc:
                raise SchemaMismatch(
                    "database has no Orbit schema; run `orbit-migrate up`"
                ) from exc
    finally:
        conn.close()
    expected = set(migration_ids())
    missing = _missing(present)
    # Migrations this server does not know are a newer version's. During a rolling upgrade
    # they are allowed while this version's routines are installed: a migration keeps the
    # previous version's routines working (docs/operations.md, "Upgrades").
    if applied - expected and missing:
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
    if missing:
        raise SchemaMismatch(
            f"this server's routines (version {version()}) are not installed; "
            "run `orbit-migrate up` with this version"
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
