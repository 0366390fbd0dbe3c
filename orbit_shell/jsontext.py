"""JSON text as Orbit reads, compares and stores it: strict parsing (RFC 8259, no NaN), a
depth check that never recurses, canonical text and its fingerprint for idempotency, and the
compact text the database keeps."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from orbit_shell.errors import InvalidArgument

# L2: how deeply a request body may nest arrays and objects. MariaDB's JSON functions refuse
# more than 31 levels, and a batch's items reach the routines inside a JSON array of objects
# (two levels more than in the body, less its own one): 30 keeps every accepted value within
# what each routine can read, and far below Python's recursion limit, so nothing accepted can
# make a later call or answer fail.
MAX_JSON_DEPTH = 30
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def nests_deeper(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects deeper than ``limit``.

    Reads the text without parsing it, so a body nested thousands deep never reaches the
    parser's recursion. Brackets inside strings do not count."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # too few brackets to nest that deep: the common case costs two counts
    depth = 0
    for token in _JSON_TOKENS.finditer(raw):
        mark = token.group()
        if mark in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif mark in (b"]", b"}"):
            depth -= 1
    return False


def check_json_depth(raw: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise INVALID_ARGUMENT when the request body ``raw`` nests deeper than ``limit``."""
    if nests_deeper(raw, limit):
        raise InvalidArgument(
            f"request body nests arrays and objects deeper than {limit} levels",
            [{"field": "body", "message": f"nested deeper than {limit} levels"}],
        )


class NotJsonNumber(ValueError):
    """NaN, Infinity or -Infinity where JSON text was wanted."""


def _not_json_number(constant: str) -> Any:
    raise NotJsonNumber(f"{constant} is not a JSON number")


def parse_json(text: str) -> Any:
    """JSON text as RFC 8259 has it. Python's parser also takes NaN, Infinity and -Infinity,
    which no strict parser reads back: a payload carrying one was stored and answered as it
    came, and every JSON.parse of that task's detail, of a list holding it and of its
    assignment then failed.

    Raises:
        ValueError: the text is not JSON (NotJsonNumber for those three words).
    """
    return _STRICT_JSON.decode(text)


# Built once: json.loads with a parse_constant builds a decoder per call (3 us a request).
_STRICT_JSON = json.JSONDecoder(parse_constant=_not_json_number)


def canonical_json(value: Any) -> str:
    """Deterministic JSON text (sorted keys, no spaces, UTF-8 kept). A float that JSON has no
    number for (NaN, infinities) raises ValueError rather than being written as JSON no
    strict parser reads."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def fingerprint(normalised: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a normalised request (idempotency comparison)."""
    return hashlib.sha256(canonical_json(normalised).encode("utf-8")).hexdigest()


def stored_json(value: Any) -> str:
    """JSON text as stored in the database (compact, key order preserved)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
