"""Resource-side fencing helpers (SPEC 6).

Orbit controls permits; it cannot recall a request already sent. After a lease expires an old
request may still arrive. The resource must, in ONE atomic operation: check namespace and key,
reject ``token < highest`` of the permit's ``(namespace, key, slot)``, raise the highest token,
deduplicate by a stable operation id, and write. Reading the highest token and then writing
separately races: two writers can both read ``highest = 5`` and both write, the stale one last.
A mutex inside one process protects nothing across processes or machines.

:class:`InMemoryFencedStore` shows where that atomic step sits, for examples and tests only (a
lock and a dict; not durable, not shared: **not a production store**).
:class:`SqlFencedStore` does the same in one database transaction on the resource owner's
MySQL/MariaDB, with the key's row locked (``SELECT ... FOR UPDATE``) while it decides.

Both fence per slot (P2). A key of limit N has N valid permits at once, one per slot, with
tokens from one counter: fenced per key, the holder of slot 0 would be refused as soon as
the newer holder of slot 1 wrote. So the resource is partitioned by slot (a pool of N
connections, N shards), each part fenced alone; with limit 1 the slot is always 0.
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
        self._highest: dict[tuple[str, int], int] = {}
        self._operations: dict[tuple[str, int, str], tuple[int, Any]] = {}
        self.values: dict[tuple[str, int], Any] = {}
        self.writes = 0
        self.rejected = 0

    def write(
        self,
        namespace: str,
        key: str,
        token: int,
        operation_id: str,
        value: Any,
        slot: int = 0,
    ) -> WriteResult:
        """Check, raise, deduplicate and write atomically, for the part ``slot`` of ``key``.

        Raises:
            PermissionError: a namespace other than the store's.
            StaleTokenError: ``token`` is lower than the highest seen for ``(key, slot)``.
        """
        if namespace != self.namespace:
            raise PermissionError(f"namespace {namespace!r} may not write here")
        check_permit(token, slot)
        with self._lock:
            highest = self._highest.get((key, slot), 0)
            if token < highest:
                self.rejected += 1
                raise StaleTokenError(token, highest)
            self._highest[(key, slot)] = token
            done = self._operations.get((key, slot, operation_id))
            if done is not None:
                return WriteResult(done[0], token, True, done[1])
            self._operations[(key, slot, operation_id)] = (token, value)
            self.values[(key, slot)] = value
            self.writes += 1
            return WriteResult(token, token, False, value)

    def highest(self, key: str, slot: int = 0) -> int:
        with self._lock:
            return self._highest.get((key, slot), 0)


def check_permit(token: int, slot: int) -> None:
    """A token is a positive int and a slot an int of 0 to 999 (P1: limits up to 1,000)."""
    if not isinstance(token, int) or isinstance(token, bool) or token <= 0:
        raise ValueError("token must be a positive int")
    if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < 1000:
        raise ValueError("slot must be an int from 0 to 999")


_TEXT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS fence_resources (
      namespace VARCHAR(100) {_TEXT} NOT NULL COMMENT 'Orbit namespace of the writer',
      resource_key VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Orbit concurrency key',
      slot SMALLINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Orbit concurrency slot: the part fenced',
      highest_token BIGINT UNSIGNED NOT NULL COMMENT 'Highest token accepted so far',
      value MEDIUMTEXT {_TEXT} NULL COMMENT 'Current value of the resource',
      PRIMARY KEY (namespace, resource_key, slot)
    ) ENGINE=InnoDB COMMENT='Fenced resources: highest token per key and slot'""",
    f"""CREATE TABLE IF NOT EXISTS fence_operations (
      seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE COMMENT 'Order writes were applied in',
      namespace VARCHAR(100) {_TEXT} NOT NULL COMMENT 'Orbit namespace',
      resource_key VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Orbit concurrency key',
      slot SMALLINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Orbit concurrency slot',
      operation_id VARCHAR(191) {_TEXT} NOT NULL COMMENT 'Stable operation id (deduplication)',
      token BIGINT UNSIGNED NOT NULL COMMENT 'Token the operation was applied with',
      value MEDIUMTEXT {_TEXT} NULL COMMENT 'Value written by the operation',
      PRIMARY KEY (namespace, resource_key, slot, operation_id)
    ) ENGINE=InnoDB COMMENT='Applied fenced operations'""",
)


# The tables that gained the slot, with their primary key since.
_SLOTTED = (
    ("fence_resources", "namespace, resource_key, slot"),
    ("fence_operations", "namespace, resource_key, slot, operation_id"),
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
        """Make the tables, or give tables made before slots their slot column (every row
        slot 0, which is what a key of limit 1 always holds)."""
        conn = dbmod.connect(self.dsn)
        try:
            with conn.cursor() as cur:
                for ddl in SCHEMA:
                    cur.execute(ddl)
                for table, primary in _SLOTTED:
                    cur.execute(
                        "SELECT COUNT(*) AS n FROM information_schema.columns WHERE "
                        "table_schema = DATABASE() AND table_name = %s AND column_name = 'slot'",
                        (table,),
                    )
                    if not cur.fetchone()["n"]:
                        cur.execute(
                            f"ALTER TABLE {table} ADD COLUMN slot SMALLINT UNSIGNED NOT NULL "
                            "DEFAULT 0 COMMENT 'Orbit concurrency slot' AFTER resource_key, "
                            f"DROP PRIMARY KEY, ADD PRIMARY KEY ({primary})"
                        )
        finally:
            conn.close()

    def write(
        self,
        namespace: str,
        key: str,
        token: int,
        operation_id: str,
        value: str,
        slot: int = 0,
    ) -> WriteResult:
        """Check, raise, deduplicate and write in one transaction (deadlocks retried), for
        the part ``slot`` of ``key``.

        Raises:
            PermissionError: another namespace.
            StaleTokenError: ``token`` is lower than the highest accepted for ``(key, slot)``.
        """
        if namespace != self.namespace:
            raise PermissionError(f"namespace {namespace!r} may not write here")
        check_permit(token, slot)
        for attempt in range(5):
            try:
                return self._write_once(key, slot, token, operation_id, value)
            except pymysql.err.OperationalError as exc:
                if exc.args[0] not in dbmod.RETRYABLE or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _write_once(
        self, key: str, slot: int, token: int, operation_id: str, value: str
    ) -> WriteResult:
        conn = dbmod.connect(self.dsn, autocommit=False)
        try:
            with conn.cursor() as cur:
                # Create the row if needed, then hold its lock for the whole decision.
                cur.execute(
                    "INSERT INTO fence_resources (namespace, resource_key, slot, highest_token) "
                    "VALUES (%s, %s, %s, 0) ON DUPLICATE KEY UPDATE namespace = namespace",
                    (self.namespace, key, slot),
                )
                cur.execute(
                    "SELECT highest_token FROM fence_resources WHERE namespace = %s "
                    "AND resource_key = %s AND slot = %s FOR UPDATE",
                    (self.namespace, key, slot),
                )
                highest = cur.fetchone()["highest_token"]
                if token < highest:
                    conn.rollback()
                    raise StaleTokenError(token, highest)
                cur.execute(
                    "SELECT token, value FROM fence_operations WHERE namespace = %s "
                    "AND resource_key = %s AND slot = %s AND operation_id = %s",
                    (self.namespace, key, slot, operation_id),
                )
                done = cur.fetchone()
                where = (self.namespace, key, slot)
                cur.execute(
                    "UPDATE fence_resources SET highest_token = %s"
                    + ("" if done else ", value = %s")
                    + " WHERE namespace = %s AND resource_key = %s AND slot = %s",
                    (token, *where) if done else (token, value, *where),
                )
                if done is None:
                    cur.execute(
                        "INSERT INTO fence_operations (namespace, resource_key, slot, "
                        "operation_id, token, value) VALUES (%s, %s, %s, %s, %s, %s)",
                        (*where, operation_id, token, value),
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

    def state(self, key: str, slot: int = 0) -> dict[str, Any] | None:
        conn = dbmod.connect(self.dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT highest_token, value FROM fence_resources WHERE namespace = %s "
                    "AND resource_key = %s AND slot = %s",
                    (self.namespace, key, slot),
                )
                return cur.fetchone()
        finally:
            conn.close()
