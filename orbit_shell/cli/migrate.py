"""``orbit-migrate``: apply migrations and install routines, or list their status."""

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
    args = parser.parse_args(argv)
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not dsn:
        print("orbit-migrate: ORBIT_MYSQL_DSN is not set", file=sys.stderr)
        return 2
    try:
        if args.command == "up":
            applied = schema.apply(dsn)
            print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
            digest = schema.routines_digest()[:12]
            print(f"installed {len(schema.routines())} routine(s), digest {digest}")
        elif args.command == "snapshot":
            sys.stdout.write(schema.snapshot(dsn))
        else:
            for migration_id, applied in schema.status(dsn):
                print(f"{'applied' if applied else 'pending'}  {migration_id}")
    except Exception as exc:  # noqa: BLE001 - a CLI boundary: print the reason, exit non-zero
        print(f"orbit-migrate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
