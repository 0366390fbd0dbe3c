"""``orbit-admin retention`` and ``orbit-admin cleanup`` (R3): a namespace's windows, shown or
set, and one full cleanup pass now."""

from __future__ import annotations

import argparse
import json

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.server import cleanup

# A window in seconds: 0 (keep nothing finished; an idle key row goes at the next pass) to
# ten years.
WINDOW_MAX = 10 * 365 * 86400


def _window(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a whole number of seconds") from None
    if not 0 <= value <= WINDOW_MAX:
        raise argparse.ArgumentTypeError(f"must be between 0 and {WINDOW_MAX} seconds")
    return value


def add_commands(sub) -> None:
    """The two subcommands on orbit-admin's parser."""
    shown = sub.add_parser(
        "retention",
        help="show or set a namespace's windows: finished tasks and idle key rows (R3)",
    )
    cleaned = sub.add_parser(
        "cleanup", help="run one full cleanup pass of a namespace now; prints rows per table"
    )
    for command in (shown, cleaned):
        command.add_argument("--application", required=True)
        command.add_argument("--environment", required=True)
        command.add_argument("--namespace", required=True)
    shown.add_argument(
        "--finished-for",
        type=_window,
        help="seconds a finished task (with its attempts, history and Idempotency-Key) is kept",
    )
    shown.add_argument(
        "--keys-idle-for", type=_window, help="seconds an idle key row is kept (default: the same)"
    )


def namespace_id(database: Database, args: argparse.Namespace) -> int:
    rows = database.query(
        "SELECT n.id FROM namespaces n JOIN environments e ON e.id = n.environment_id "
        "JOIN applications a ON a.id = n.application_id "
        "WHERE a.name = %s AND e.name = %s AND n.name = %s",
        (args.application, args.environment, args.namespace),
    )
    if not rows:
        raise errors.NotFound("namespace not found")
    return rows[0]["id"]


def retention(database: Database, args: argparse.Namespace) -> str:
    ns = namespace_id(database, args)
    [[row]] = database.call("namespace_retention", ns, args.finished_for, args.keys_idle_for)
    return json.dumps(row, default=str)


def run_cleanup(database: Database, args: argparse.Namespace) -> str:
    return json.dumps(cleanup.run_pass(database, namespace_id(database, args)))
