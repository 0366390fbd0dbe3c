"""The batch procedures (attempt_start_many, attempt_result_many): one transaction for many
attempts of one session, each item answered with its own data or its own error.

Both the HTTP routes and the MySQL worker transport call these, so the two transports batch
the same way (W9).
"""

from __future__ import annotations

import json
from typing import Any

from . import errors, serialize, validation
from .db import Database, signal_error


def start_many(
    db: Database, namespace_id: int, session_id: str, attempt_ids: list[str]
) -> list[dict[str, Any] | errors.OrbitError]:
    """attempt_start per id, in order: the attempt (now RUNNING) or the item's error."""
    [rows] = db.call("attempt_start_many", namespace_id, session_id, json.dumps(attempt_ids))
    return [
        signal_error(r["item_error"]) if r["item_error"] else serialize.attempt(r) for r in rows
    ]


def result_many(
    db: Database, namespace_id: int, session_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any] | errors.OrbitError]:
    """attempt_result per item, in order: ``{attempt_id, task_id, duplicate}`` or the item's
    error. Results and errors travel as the same canonical JSON text the single call sends, so
    a result repeated through either route is recognised as a duplicate."""
    wire = [
        {
            "attempt_id": item["attempt_id"],
            "outcome": item["outcome"],
            "retryable": int(bool(item.get("retryable"))),
            "result": _text(item.get("result")),
            "error": _text(item.get("error")),
        }
        for item in items
    ]
    # UTF-8 as is (not \u escapes), so JSON_UNQUOTE gives back exactly the text sent.
    [rows] = db.call(
        "attempt_result_many", namespace_id, session_id, json.dumps(wire, ensure_ascii=False)
    )
    return [
        signal_error(r["item_error"])
        if r["item_error"]
        else {
            "attempt_id": r["attempt_id"],
            "task_id": r["task_id"],
            "duplicate": bool(r["duplicate"]),
        }
        for r in rows
    ]


def _text(value: Any) -> str | None:
    return None if value is None else validation.canonical_json(value)
