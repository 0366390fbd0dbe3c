"""Key policies (P1, P3, P6): their reads and their shape in answers. Writes go through
``key_policy_write``, which keeps every key row's limit and rate in step in the same
transaction."""

from __future__ import annotations

from typing import Any

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.engine.serialize import iso, policy
from orbit_shell.validation import HEX32

# A namespace holds at most this many policies (key_policy_write refuses more): a key row made
# reads the prefix rules, and GET /v1/key-policies answers them all in one page.
MAX_POLICIES = 1000
COLUMNS = (
    "public_id AS policy_id, match_kind, pattern, key_limit, rate_permits, rate_seconds, "
    "created_at, updated_at"
)


def applying(db: Database, namespace_id: int, key: str) -> dict[str, Any] | None:
    """The rule that gives ``key`` its limit: the exact one, else the longest prefix
    (key_policy_value's choice), or None (limit 1)."""
    rows = db.query(
        f"SELECT {COLUMNS} FROM key_policies WHERE namespace_id = %s AND ("
        "(match_kind = 'KEY' AND pattern = %s) OR "
        "(match_kind = 'PREFIX' AND LEFT(%s, CHAR_LENGTH(pattern)) = pattern)) "
        "ORDER BY match_kind = 'KEY' DESC, CHAR_LENGTH(pattern) DESC LIMIT 1",
        [namespace_id, key, key],
    )
    return rows[0] if rows else None


def listed(db: Database, namespace_id: int) -> list[dict[str, Any]]:
    """Every policy of the namespace, exact keys first, each kind in byte order."""
    return db.query(
        f"SELECT {COLUMNS} FROM key_policies WHERE namespace_id = %s ORDER BY match_kind, pattern",
        [namespace_id],
    )


def known(policy_id: str) -> str:
    """A policy id as a path carries it: 404 for one no policy could have (32 lowercase hex),
    before the database is asked; key_policy_write answers 404 for one not in the
    namespace, before it writes anything."""
    if not HEX32.match(policy_id):
        raise errors.NotFound("key policy not found")
    return policy_id


def one(db: Database, namespace_id: int, policy_id: str) -> dict[str, Any]:
    rows = db.query(
        f"SELECT {COLUMNS} FROM key_policies WHERE namespace_id = %s AND public_id = %s",
        [namespace_id, policy_id],
    )
    if not rows:
        raise errors.NotFound("key policy not found")
    return rows[0]


def serialize(row: dict[str, Any]) -> dict[str, Any]:
    """``{"policy_id", "key" | "prefix", "limit", "rate", "created_at", "updated_at"}``;
    ``rate`` is ``{"permits", "per_seconds"}`` or null."""
    return {
        **policy(row),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }
