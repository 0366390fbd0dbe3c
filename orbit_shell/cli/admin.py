"""``orbit-admin``: operator commands (bootstrap a tenant, create a direct-worker account)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import auth, errors
from ..db import Database

BASE_SCOPES = ("queues:manage", "tasks:submit", "tasks:read")
WORKER_SCOPES = ("workers:connect", "workers:consume")


def bootstrap(database: Database, args: argparse.Namespace) -> dict:
    """Create or reuse the tenant and queue, add a credential, write the credentials file."""
    scopes = BASE_SCOPES + (WORKER_SCOPES if args.worker_access else ())
    token, public_id, digest = auth.new_token()
    [[row]] = database.call(
        "tenant_bootstrap",
        args.application,
        args.environment,
        args.namespace,
        args.queue,
        public_id,
        digest,
        ",".join(scopes),
        f"bootstrap {args.application}/{args.namespace}",
    )
    document = {
        "token": token,
        "queue_id": row["queue_id"],
        "application": args.application,
        "environment": args.environment,
        "namespace": args.namespace,
        "scopes": list(scopes),
    }
    output = Path(args.output)
    # Create with 0600 from the start: the secret must never be readable by others, not even
    # for the moment between write and chmod.
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
    os.chmod(output, 0o600)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orbit-admin", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    boot = sub.add_parser("bootstrap", help="create tenant, queue and a credential")
    boot.add_argument("--application", required=True)
    boot.add_argument("--namespace", required=True)
    boot.add_argument("--environment", required=True)
    boot.add_argument("--queue", required=True)
    boot.add_argument("--worker-access", action="store_true")
    boot.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not dsn:
        print("orbit-admin: ORBIT_MYSQL_DSN is not set", file=sys.stderr)
        return 2
    database = Database(dsn)
    try:
        document = bootstrap(database, args)
    except errors.OrbitError as exc:
        print(f"orbit-admin: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        database.close()
    print(
        f"bootstrapped {document['application']}/{document['environment']}/"
        f"{document['namespace']} queue {document['queue_id']} -> {args.output}"
    )
    return 0
