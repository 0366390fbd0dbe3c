"""Database access: DSN parsing, connections, the CALL helper and the one DB-error mapping.

Every state change in Orbit is a stored procedure call made through :meth:`Database.call`.
Procedures raise ``SIGNAL SQLSTATE '45000'`` with ``MESSAGE_TEXT = 'CODE: message'``; that is
MySQL error 1644, mapped here to the :mod:`orbit_shell.errors` class of that code. Deadlocks and
lock-wait timeouts roll the procedure back entirely (its EXIT HANDLER), so the call is retried
whole, a bounded number of times.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import random
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import pymysql
import pymysql.cursors

from orbit_shell import errors
from orbit_shell.engine.dberrors import (
    ER_SP_DOES_NOT_EXIST,
    SWITCH_RETRY_AFTER,
    code_of,
    map_error,
    switching,
)

log = logging.getLogger("orbit.db")

# Seconds a connection waits for the server to read or answer before it is given up
# (``ORBIT_DB_TIMEOUT``): above InnoDB's default lock wait (50 s), so no normal run of a
# routine, lock waits included, comes near it; a server that stops answering then costs a
# request this long, not for ever.
IO_TIMEOUT = 60.0
# Seconds within which every listed server is asked, in parallel, whether it is the primary:
# a host that accepts TCP and never speaks costs a discovery (and /readyz) this much at most.
PROBE_TIMEOUT = 0.8
DEADLOCK_RETRIES = 5
# Every Orbit connection's sql_mode, and so the mode every routine is created and runs under:
# MySQL 8.0's default, which MariaDB 10.6+ accepts. MariaDB's own default lacks
# ONLY_FULL_GROUP_BY, under which MySQL 8 refuses, for one, an ORDER BY on an aggregate; with
# one fixed mode the tests on MariaDB run Orbit's SQL under MySQL 8's rules.
SQL_MODE = (
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
)


def parse_servers(dsn: str) -> list[dict[str, Any]]:
    """pymysql kwargs for each server of ``mysql://user:password@host1:port1,host2:port2/db``
    (one or more hosts, the same account, database and options on each; H3).

    Raises:
        ValueError: when the URL is not a mysql:// URL with a database, or names a unix socket
            with several hosts.
    """
    return [parse_dsn(one) for one in _server_dsns(dsn)]


def _server_dsns(dsn: str) -> list[str]:
    """``dsn`` once per host it lists, each naming that host alone."""
    url = urlparse(dsn)
    if url.scheme != "mysql" or not url.path.strip("/"):
        raise ValueError("ORBIT_MYSQL_DSN must look like mysql://user:password@host:port/database")
    userinfo, _, hosts = url.netloc.rpartition("@")
    if "," not in hosts:
        return [dsn]
    if "unix_socket" in parse_qs(url.query):
        raise ValueError("ORBIT_MYSQL_DSN: unix_socket names one server; list hosts without it")
    return [
        url._replace(netloc=f"{userinfo}@{host}" if userinfo else host).geturl()
        for host in hosts.split(",")
    ]


def parse_dsn(dsn: str) -> dict[str, Any]:
    """Turn ``mysql://user:password@host:port/database?unix_socket=PATH`` into pymysql kwargs
    (for a list of hosts, the first's; ``parse_servers`` gives each).

    ``?ssl_ca=PATH`` asks for TLS, required and verified against that CA. Without it the
    connection is plain, said here rather than left to the driver: PyMySQL 2 otherwise
    "prefers" TLS, falling back silently when the server has none, and builds a TLS context
    for every connection (~50 ms of CPU each, measured in a worker writing through
    :class:`~orbit_shell.sdk.fence.SqlFencedStore`).

    Raises:
        ValueError: when the URL is not a mysql:// URL with a database.
    """
    url = urlparse(dsn)
    if url.scheme != "mysql" or not url.path.strip("/"):
        raise ValueError("ORBIT_MYSQL_DSN must look like mysql://user:password@host:port/database")
    if "," in url.netloc:
        return parse_dsn(_server_dsns(dsn)[0])
    kwargs: dict[str, Any] = {
        "host": url.hostname or "127.0.0.1",
        "port": url.port or 3306,
        "user": unquote(url.username or "root"),
        "password": unquote(url.password or ""),
        "database": url.path.strip("/"),
    }
    params = parse_qs(url.query)
    if "unix_socket" in params:
        kwargs["unix_socket"] = params["unix_socket"][0]
    if "ssl_ca" in params:
        kwargs.update(ssl_ca=params["ssl_ca"][0], ssl_verify_cert=True)
    else:
        kwargs["ssl_disabled"] = True
    return kwargs


def connect(dsn: str, **overrides: Any) -> pymysql.connections.Connection:
    """Open one autocommit utf8mb4 connection whose session clock is UTC, in :data:`SQL_MODE`;
    with several hosts, to the primary (``find_primary``)."""
    servers = parse_servers(dsn)
    if len(servers) == 1:
        return _open(servers[0], **overrides)
    return _open(servers[find_primary(servers)], **overrides)


def primary_dsn(dsn: str) -> str:
    """``dsn`` naming only its primary (for tools that take one server, such as yoyo)."""
    one = _server_dsns(dsn)
    return one[0] if len(one) == 1 else one[find_primary([parse_dsn(d) for d in one])]


def _open_quick(server: dict[str, Any]) -> pymysql.connections.Connection | None:
    """A connection to ``server`` whose connect, reads and writes each wait PROBE_TIMEOUT at
    most; None when it cannot be opened in that time."""
    t = PROBE_TIMEOUT
    try:
        return _open(server, connect_timeout=t, read_timeout=t, write_timeout=t)
    except pymysql.MySQLError:
        return None


def _probe(server: dict[str, Any]) -> int | None:
    """A server's token epoch when it takes writes (-1 before migrations), else None: not
    writable, or no answer within PROBE_TIMEOUT."""
    conn = _open_quick(server)
    if conn is None:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.read_only AS ro")
            if cur.fetchone()["ro"]:
                return None
            try:
                cur.execute("SELECT epoch FROM token_epoch WHERE id = 1")
                row = cur.fetchone()
                return int(row["epoch"]) if row else -1
            except pymysql.err.ProgrammingError:  # not migrated yet
                return -1
    except pymysql.MySQLError:
        return None
    finally:
        conn.close()


def find_primary(servers: list[dict[str, Any]]) -> int:
    """The index of the server to write to: a writable one (``read_only`` off), the one with
    the highest token epoch when several are (a failed primary restarted writable after a
    promotion has the lower epoch; H1). Every server is asked at once (threads, greenlets
    under gevent), so a silent host costs PROBE_TIMEOUT, not that per host; servers that do
    not answer in time are passed over.

    Raises:
        Unavailable: no server is writable now (a switch in progress); ``retry_after`` set.
    """
    if len(servers) == 1:
        epochs = [_probe(servers[0])]
    else:
        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            epochs = list(pool.map(_probe, servers))
    best: tuple[int, int] | None = None
    for index, epoch in enumerate(epochs):
        if epoch is not None and (best is None or epoch > best[0]):
            best = (epoch, index)
    if best is None:
        error = errors.Unavailable("no writable database server; retry shortly")
        error.retry_after = SWITCH_RETRY_AFTER
        raise error
    return best[1]


def replica_lag(server: dict[str, Any]) -> float | None:
    """Seconds the replica ``server`` is behind its primary, as it says itself; None when it
    does not answer within PROBE_TIMEOUT, replicates from nothing, has stopped applying, or the
    account may not ask (it needs ``SLAVE MONITOR`` on MariaDB, ``REPLICATION CLIENT`` on
    MySQL). ``SHOW REPLICA STATUS`` both accept; the column is the dialects' one difference."""
    conn = _open_quick(server)
    if conn is None:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW REPLICA STATUS")
            row = cur.fetchone()
    except pymysql.MySQLError:
        return None
    finally:
        conn.close()
    behind = row and row.get("Seconds_Behind_Master", row.get("Seconds_Behind_Source"))
    return None if behind is None else float(behind)


def _open(kwargs: dict[str, Any], **overrides: Any) -> pymysql.connections.Connection:
    kwargs = dict(kwargs)
    kwargs.update(
        charset="utf8mb4",
        autocommit=True,
        cursorclass=pymysql.cursors.DictCursor,
        init_command=f"SET time_zone = '+00:00', sql_mode = '{SQL_MODE}'",
        connect_timeout=5,
        read_timeout=IO_TIMEOUT,
        write_timeout=IO_TIMEOUT,
    )
    kwargs.update(overrides)
    return pymysql.connect(**kwargs)


def _unpatched_poll():
    """``select.poll`` as the C library gives it. Under gevent's monkey patching it becomes a
    cooperative poll that arms a watcher and a timeout even for a zero wait: about 5% of a
    gunicorn worker's CPU on single submissions, where every lend checks a connection."""
    try:
        from gevent import monkey
    except ImportError:  # an SDK-only install: nothing is patched
        return select.poll
    return monkey.get_original("select", "poll")


_poll = _unpatched_poll()


def peer_closed(sock: socket.socket | None) -> bool:
    """True when the other end of ``sock`` has closed it (it reads end of file), or it is
    broken; False while it is open, whether or not bytes wait to be read. Costs no round trip.

    Polls with no wait, then peeks only a socket that would not block: a peek with
    MSG_DONTWAIT is not enough under gevent, whose socket waits out EAGAIN instead of
    returning it. ``poll``, not ``select``: a server with many connections has descriptors
    past select's 1,024. A zero wait never blocks, so the unpatched poll serves gevent too.
    """
    if sock is None:
        return True
    try:
        poller = _poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0)) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):  # reset, or closed under us
        return True


def _peer_closed(conn: pymysql.connections.Connection) -> bool:
    """True when the server already closed this idle connection (EOF waiting on the socket).

    A call on such a connection would fail after its bytes were sent, which the caller cannot
    tell apart from a connection lost mid-procedure; checking first costs no round trip.
    """
    return peer_closed(getattr(conn, "_sock", None))  # pymysql keeps the socket here


class Database:
    """A small thread-safe connection pool with the procedure CALL helper.

    ``max_open`` bounds the connections lent at once, and so the connections this pool ever
    has open (a new one is opened only when none is idle): a server holding many requests at
    once (gevent) then waits for a connection instead of opening one per request until the
    database refuses everyone (max_connections). A wait past ``OPEN_WAIT`` is UNAVAILABLE.
    """

    OPEN_WAIT = 10.0  # seconds a call waits for a connection when max_open are lent

    def __init__(
        self,
        dsn: str,
        pool_size: int = 8,
        sleep=None,
        max_open: int | None = None,
        routines: str | None = None,
        io_timeout: float = IO_TIMEOUT,
    ) -> None:
        """``routines``: the routine version to call, the calling code's
        (``schema.version()``); None calls the latest the database has installed
        (``orbit_meta``), read once and again when a routine of it is not found.
        ``io_timeout``: seconds a call waits for the server to read or answer (IO_TIMEOUT)."""
        self.dsn = dsn
        self._timeouts = {"read_timeout": io_timeout, "write_timeout": io_timeout}
        self._routines = routines
        self._latest: str | None = None
        # With several servers (H3) connections go to the primary found last; an error that
        # says it is gone or takes no writes forgets it and the pool, and the next connection
        # looks again (find_primary).
        self._servers = parse_servers(dsn)
        self._primary: int | None = 0 if len(self._servers) == 1 else None
        self._idle: queue.LifoQueue[pymysql.connections.Connection] = queue.LifoQueue(pool_size)
        self._sleep = sleep or time.sleep  # looked up now: gevent may have patched it
        self._lendable = threading.BoundedSemaphore(max_open) if max_open else None

    @contextlib.contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection]:
        """Lend a pooled connection; a connection that failed is closed, not returned."""
        if self._lendable is None:
            with self._lend() as conn:
                yield conn
            return
        if not self._lendable.acquire(timeout=self.OPEN_WAIT):
            raise errors.Unavailable("database busy; retry later")
        try:
            with self._lend() as conn:
                yield conn
        finally:
            self._lendable.release()

    @contextlib.contextmanager
    def _lend(self) -> Iterator[pymysql.connections.Connection]:
        conn = None
        while conn is None:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            if _peer_closed(conn):  # killed, timed out or server restarted while idle
                with contextlib.suppress(Exception):
                    conn.close()
                conn = None
        if conn is None:
            try:
                primary = self._primary
                if primary is None:
                    primary = self._primary = find_primary(self._servers)
                conn = _open(self._servers[primary], **self._timeouts)
            except pymysql.MySQLError as exc:
                log.warning("connect failed: %s", exc, extra={"action": "db.connect"})
                self.forget_primary()
                raise errors.Unavailable("database unavailable") from exc
        ok = False
        try:
            yield conn
            ok = True
        finally:
            if ok and conn.open:
                try:
                    self._idle.put_nowait(conn)
                except queue.Full:
                    conn.close()
            else:
                with contextlib.suppress(Exception):
                    conn.close()

    def call(self, procedure: str, *args: Any) -> list[list[dict[str, Any]]]:
        """CALL a procedure and return all its result sets (deadlocks retried whole).

        Raises:
            OrbitError: the error the procedure signalled, UNAVAILABLE when the database cannot
                be reached, INTERNAL for anything unexpected.
        """
        placeholders = ", ".join(["%s"] * len(args))
        refreshed = False
        for attempt in range(DEADLOCK_RETRIES + 1):
            sql = f"CALL {self.routine(procedure)}({placeholders})"
            try:
                with self.connection() as conn, conn.cursor() as cur:
                    cur.execute(sql, args)
                    # A CALL returns one result set per SELECT plus a final status; drain them
                    # all or the next statement on this connection fails.
                    sets = []
                    while True:
                        if cur.description is not None:
                            sets.append(list(cur.fetchall()))
                        if not cur.nextset():
                            return sets
            except pymysql.MySQLError as exc:
                gone = code_of(exc) == ER_SP_DOES_NOT_EXIST
                if gone and self._routines is None and not refreshed:
                    self._latest, refreshed = None, True  # a newer version replaced the latest
                    continue
                mapped = map_error(exc)
                if switching(exc):
                    self.forget_primary()
                if mapped is None and attempt < DEADLOCK_RETRIES:
                    log.info(
                        "retrying %s after %s",
                        procedure,
                        exc.args[0],
                        extra={"action": "db.retry", "procedure": procedure},
                    )
                    self._sleep(random.uniform(0.001, 0.01) * (attempt + 1))
                    continue
                if mapped is None:
                    raise errors.Unavailable("database busy; retry later") from exc
                if isinstance(mapped, errors.Internal):
                    log.error(
                        "procedure %s failed: %r",
                        procedure,
                        exc,
                        extra={"action": "db.error", "procedure": procedure},
                    )
                raise mapped from exc
        raise AssertionError("unreachable")

    def routine(self, name: str) -> str:
        """The installed name of routine ``name`` in the version this pool calls. A name
        qualified by its database (``other_db.proc``) is not one of Orbit's versioned
        routines and is called as it is (the benchmark's floor procedures)."""
        if "." in name:
            return name
        version = self._routines or self._latest
        if version is None:
            rows = self.query(
                "SELECT meta_value FROM orbit_meta WHERE meta_key = 'routines_version'"
            )
            if not rows:
                raise errors.Unavailable("no Orbit routines installed; run `orbit-migrate up`")
            version = self._latest = rows[0]["meta_value"]
        return f"{name}__{version}"

    def query(self, sql: str, args: Any = None) -> list[dict[str, Any]]:
        """Run one read-only SELECT."""
        try:
            with self.connection() as conn, conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        except pymysql.MySQLError as exc:
            if switching(exc):
                self.forget_primary()
            mapped = map_error(exc) or errors.Unavailable("database busy; retry later")
            if isinstance(mapped, errors.Internal):
                log.error("query failed: %r", exc, extra={"action": "db.error"})
            raise mapped from exc

    def replicas(self) -> list[dict[str, Any]]:
        """pymysql kwargs of the servers this pool does not write to: with several hosts, every
        one but the primary found last (none until one is found); with one host, none."""
        if self._primary is None:
            return []
        return [s for i, s in enumerate(self._servers) if i != self._primary]

    def forget_primary(self) -> None:
        """After a failover, a fence or a server that stopped answering: look for the primary
        again and drop idle connections (they may be to the old one, or as stuck as the one
        that failed). A single server is always its own primary."""
        if len(self._servers) > 1:
            self._primary = None
        self.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return
