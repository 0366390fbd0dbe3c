"""``orbit-migrate``: apply migrations and install this version's routines, list their status,
or drop the routines of older versions."""

from __future__ import annotations

import argparse
import os
import sys

from orbit_shell.engine import schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orbit-migrate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="apply every pending migration and (re)install the routines")
    sub.add_parser("status", help="list applied and pending migrations")
    sub.add_parser("snapshot", help="print the database's tables as CREATE TABLE statements")
    prune = sub.add_parser(
        "prune", help="drop the routines of every other version (once no server runs one)"
    )
    prune.add_argument("--keep", action="append", default=[], help="a version to keep too")
    args = parser.parse_args(argv)
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not dsn:
        print("orbit-migrate: ORBIT_MYSQL_DSN is not set", file=sys.stderr)
        return 2
    try:
        if args.command == "up":
            applied = schema.apply(dsn)
            print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
            print(f"routines of version {schema.version()}: {len(schema.routines())} installed")
        elif args.command == "prune":
            dropped = schema.prune(dsn, tuple(args.keep))
            print(f"dropped the routines of: {', '.join(dropped) or 'no other version'}")
        elif args.command == "snapshot":
            sys.stdout.write(schema.snapshot(dsn))
        else:
            for migration_id, applied in schema.status(dsn):
                print(f"{'applied' if applied else 'pending'}  {migration_id}")
    except Exception as exc:  # noqa: BLE001 - a CLI boundary: print the reason, exit non-zero
        print(f"orbit-migrate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
