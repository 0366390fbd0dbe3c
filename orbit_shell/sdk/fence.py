"""Resource-side fencing helpers (SPEC 6).

Orbit controls permits; it cannot recall a request already sent. After a lease expires an old
request may still arrive. The resource must, in ONE atomic operation: check namespace and key,
reject ``token < highest``, raise the highest token, deduplicate by a stable operation id, and
write. Reading the highest token and then writing separately races: two writers can both read
``highest = 5`` and both write, the stale one last. A mutex inside one process protects nothing
across processes or machines.

:class:`InMemoryFencedStore` shows where that atomic step sits, for examples and tests only (a
lock and a dict; not durable, not shared: **not a production store**).
:class:`SqlFencedStore` does the same in one database transaction on the resource owner's
MySQL/MariaDB, with the key's row locked (``SELECT ... FOR UPDATE``) while it decides.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pymysql

from orbit_shell.engine import db as dbmod


class StaleTokenError(Exception):
    """The write carries a token lower than the highest the resource has seen."""

    def __init__(self, token: int, highest: int) -> None:
        super().__init__(f"stale token {token} < highest {highest}")
        self.token, self.highest = token, highest


@dataclass(frozen=True)
class WriteResult:
    """``duplicate`` is True when the operation id was already applied (nothing written)."""

    token: int
    highest: int
    duplicate: bool
    value: Any


class InMemoryFencedStore:
    """Fenced writes in memory: a lock and a map. For examples and tests, not production."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._lock = threading.Lock()
        self._highest: dict[str, int] = {}
        self._operations: dict[tuple[str, str], tuple[int, Any]] = {}
        self.values: dict[str, Any] = {}
        self.writes = 0
        self.rejected = 0

    def write(
        self, namespace: str, key: str, token: int, operation_id: str, value: Any
    ) -> WriteResult:
        """Check, raise, deduplicate and write atomically.

        Raises:
            PermissionError: a namespace other than the store's.
            StaleTokenError: ``token`` is lower than the highest seen for ``key``.
        """
        if namespace != self.namespace:
            raise PermissionError(f"namespace {namespace!r} may not write here")
        if not isinstance(token, int) or isinstance(token, bool) or token <= 0:
            raise ValueError("token must be a positive int")
        with self._lock:
            highest = self._highest.get(key, 0)
            if token < highest:
                self.rejected += 1
                raise StaleTokenError(token, highest)
            self._highest[key] = token
            done = self._operations.get((key, operation_id))
            if done is not None:
                return WriteResult(done[0], token, True, done[1])
            self._operations[(key, operation_id)] = (token, value)
            self.values[key] = value
            self.writes += 1
            return WriteResult(token, token, False, value)

    def highest(self, key: str) -> int:
        with self._lock:
            return self._highest.get(key, 0)


_TEXT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS fence_resources (
      namespace VARCHAR(100) {_TEXT} NOT NULL COMMENT 'Orbit namespace of the writer',
      resource_key VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Orbit concurrency key',
      highest_token BIGINT UNSIGNED NOT NULL COMMENT 'Highest token accepted so far',
      value MEDIUMTEXT {_TEXT} NULL COMMENT 'Current value of the resource',
      PRIMARY KEY (namespace, resource_key)
    ) ENGINE=InnoDB COMMENT='Fenced resources: highest token per key'""",
    f"""CREATE TABLE IF NOT EXISTS fence_operations (
      seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE COMMENT 'Order writes were applied in',
      namespace VARCHAR(100) {_TEXT} NOT NULL COMMENT 'Orbit namespace',
      resource_key VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Orbit concurrency key',
      operation_id VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Stable operation id (deduplication)',
      token BIGINT UNSIGNED NOT NULL COMMENT 'Token the operation was applied with',
      value MEDIUMTEXT {_TEXT} NULL COMMENT 'Value written by the operation',
      PRIMARY KEY (namespace, resource_key, operation_id)
    ) ENGINE=InnoDB COMMENT='Applied fenced operations'""",
)


class SqlFencedStore:
    """Fenced writes in one transaction on the resource owner's MySQL/MariaDB.

    Args:
        dsn: ``mysql://...`` of the resource database (not necessarily Orbit's).
        namespace: the only namespace allowed to write.
    """

    def __init__(self, dsn: str, namespace: str) -> None:
        self.dsn = dsn
        self.namespace = namespace

    def ensure_schema(self) -> None:
        conn = dbmod.connect(self.dsn)
        try:
            with conn.cursor() as cur:
                for ddl in SCHEMA:
                    cur.execute(ddl)
        finally:
            conn.close()

    def write(
        self, namespace: str, key: str, token: int, operation_id: str, value: str
    ) -> WriteResult:
        """Check, raise, deduplicate and write in one transaction (deadlocks retried).

        Raises:
            PermissionError: another namespace.
            StaleTokenError: ``token`` is lower than the highest accepted for ``key``.
        """
        if namespace != self.namespace:
            raise PermissionError(f"namespace {namespace!r} may not write here")
        for attempt in range(5):
            try:
                return self._write_once(key, token, operation_id, value)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in dbmod.RETRYABLE or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _write_once(self, key: str, token: int, operation_id: str, value: str) -> WriteResult:
        conn = dbmod.connect(self.dsn, autocommit=False)
        try:
            with conn.cursor() as cur:
                # Create the row if needed, then hold its lock for the whole decision.
                cur.execute(
                    "INSERT INTO fence_resources (namespace, resource_key, highest_token) "
                    "VALUES (%s, %s, 0) ON DUPLICATE KEY UPDATE namespace = namespace",
                    (self.namespace, key),
                )
                cur.execute(
                    "SELECT highest_token FROM fence_resources WHERE namespace = %s "
                    "AND resource_key = %s FOR UPDATE",
                    (self.namespace, key),
                )
                highest = cur.fetchone()["highest_token"]
                if token < highest:
                    conn.rollback()
                    raise StaleTokenError(token, highest)
                cur.execute(
                    "SELECT token, value FROM fence_operations WHERE namespace = %s "
                    "AND resource_key = %s AND operation_id = %s",
                    (self.namespace, key, operation_id),
                )
                done = cur.fetchone()
                cur.execute(
                    "UPDATE fence_resources SET highest_token = %s"
                    + ("" if done else ", value = %s")
                    + " WHERE namespace = %s AND resource_key = %s",
                    (token, self.namespace, key) if done else (token, value, self.namespace, key),
                )
                if done is None:
                    cur.execute(
                        "INSERT INTO fence_operations (namespace, resource_key, "
                        "operation_id, token, value) VALUES (%s, %s, %s, %s, %s)",
                        (self.namespace, key, operation_id, token, value),
                    )
            conn.commit()
            if done is not None:
                return WriteResult(done["token"], token, True, done["value"])
            return WriteResult(token, token, False, value)
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()

    def state(self, key: str) -> dict[str, Any] | None:
        conn = dbmod.connect(self.dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT highest_token, value FROM fence_resources WHERE namespace = %s "
                    "AND resource_key = %s",
                    (self.namespace, key),
                )
                return cur.fetchone()
        finally:
            conn.close()
