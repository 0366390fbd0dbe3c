"""The request body of a key policy (P1, P3): exactly one of ``key`` and ``prefix``, each
checked as a concurrency key is (K2), and a ``limit`` of 1 to 1,000."""

from __future__ import annotations

from typing import Any

from orbit_shell.validation import Field, Integer, KeyText, Shape

MAX_LIMIT = 1000


KEY_POLICY = Shape(
    {
        "key": Field(KeyText()),
        "prefix": Field(KeyText()),
        "limit": Field(Integer(1, MAX_LIMIT), required=True),
    },
    one_of=("key", "prefix"),
)


def match(body: dict[str, Any]) -> tuple[str, str]:
    """``('KEY', key)`` or ``('PREFIX', prefix)`` of a parsed body."""
    return ("KEY", body["key"]) if "key" in body else ("PREFIX", body["prefix"])
