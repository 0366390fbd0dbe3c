"""The request body of a key policy (P1, P3, P6): exactly one of ``key`` and ``prefix``, each
checked as a concurrency key is (K2), a ``limit`` of 1 to 1,000, and optionally a ``rate``:
at most ``permits`` (1 to 1,000) permits of a key begin in any ``per_seconds`` (1 s to a
day)."""

from __future__ import annotations

from typing import Any

from orbit_shell.validation import Field, Integer, KeyText, Object, Shape

MAX_LIMIT = 1000
RATE = Shape(
    {
        "permits": Field(Integer(1, 1000), required=True),
        "per_seconds": Field(Integer(1, 86_400), required=True),
    }
)


KEY_POLICY = Shape(
    {
        "key": Field(KeyText()),
        "prefix": Field(KeyText()),
        "limit": Field(Integer(1, MAX_LIMIT), required=True),
        "rate": Field(Object(RATE), default=None),
    },
    one_of=("key", "prefix"),
)


def write_args(body: dict[str, Any]) -> tuple:
    """``key_policy_write``'s kind, pattern, limit and rate of a parsed body."""
    kind, pattern = ("KEY", body["key"]) if "key" in body else ("PREFIX", body["prefix"])
    rate = body["rate"] or {"permits": None, "per_seconds": None}
    return kind, pattern, body["limit"], rate["permits"], rate["per_seconds"]
