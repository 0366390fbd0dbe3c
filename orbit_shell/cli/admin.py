"""``orbit-admin``: operator commands (bootstrap a tenant, create credentials with chosen scopes,
revoke them, set quotas, key policies and retention windows, run a cleanup pass, create a
direct-worker account, promote a replica, raise the token epoch after a restore)."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
from pathlib import Path
from urllib.parse import quote

import pymysql

from orbit_shell import errors
from orbit_shell.cli import key_policy, retention
from orbit_shell.cli import promote as promotion
from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.server import auth
from orbit_shell.validation import HEX32, Text

BASE_SCOPES = ("queues:manage", "tasks:submit", "tasks:read", "tasks:manage")
WORKER_SCOPES = ("workers:connect", "workers:consume")

# Tenant and queue names as the API takes a queue's: the database compares names padded with
# spaces, so ``--application "a1 "`` was the tenant ``a1``, and got its credential or quota.
NAME = Text(1, 100, trimmed=True)
LABEL = Text(0, 200)


def check_names(args: argparse.Namespace) -> None:
    """INVALID_ARGUMENT, before the database is asked, for a name the command was given that
    is empty, longer than its column, holds a control character or has whitespace at an end."""
    for field in ("application", "environment", "namespace", "queue"):
        if getattr(args, field, None) is not None:
            NAME(f"--{field}", getattr(args, field))
    if getattr(args, "label", None):
        LABEL("--label", args.label)


def bootstrap(database: Database, args: argparse.Namespace) -> dict:
    """Create or reuse the tenant and queue, add a credential, write the credentials file."""
    check_names(args)
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
        "credential_id": public_id,
        "queue_id": row["queue_id"],
        "application": args.application,
        "environment": args.environment,
        "namespace": args.namespace,
        "scopes": list(scopes),
    }
    _write_private(Path(args.output), document)
    return document


def create_credential(database: Database, args: argparse.Namespace) -> dict:
    """A credential of an existing namespace with the given scopes, over every queue or only
    the listed ones; writes the credentials file (0600) and returns its document."""
    check_names(args)
    scopes = [s for s in (p.strip() for p in args.scopes.split(",")) if s]
    unknown = sorted(set(scopes) - set(auth.SCOPES))
    if not scopes or unknown:
        raise errors.InvalidArgument(
            f"scopes must be some of {', '.join(auth.SCOPES)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    queue_ids = None
    if args.queue_ids is not None:
        queue_ids = sorted({q.strip() for q in args.queue_ids.split(",") if q.strip()})
        bad = [q for q in queue_ids if not HEX32.match(q)]
        if not queue_ids or bad:
            raise errors.InvalidArgument(
                "queue ids must be 32 lowercase hex characters, separated by commas"
            )
    scopes = [s for s in auth.SCOPES if s in scopes]  # canonical order, no repeats
    token, public_id, digest = auth.new_token()
    [[row]] = database.call(
        "credential_create",
        args.application,
        args.environment,
        args.namespace,
        public_id,
        digest,
        ",".join(scopes),
        None if queue_ids is None else json.dumps(queue_ids),
        args.label or f"credential {args.application}/{args.namespace}",
    )
    document = {
        "token": token,
        "credential_id": row["credential_id"],
        "application": args.application,
        "environment": args.environment,
        "namespace": args.namespace,
        "scopes": scopes,
        "queue_ids": "all" if queue_ids is None else queue_ids,
    }
    _write_private(Path(args.output), document)
    return document


# What a direct (MySQL transport) worker may run: nothing else, and no table privileges. The
# procedures are SQL SECURITY DEFINER, so they act with their definer's rights (W9).
WORKER_PROCEDURES = (
    "worker_namespace",
    "worker_hello",
    "worker_claim",
    "session_ready",
    "attempt_start",
    "attempt_renew",
    "attempt_result",
    "attempt_start_many",
    "attempt_result_many",
    "worker_report_claim",
    "worker_goodbye",
)
# What a direct producer (the SDK's DirectProducer) may run: resolve its names and queues, and
# submit (each procedure refuses it any namespace it is not bound to, and records its account
# as the actor).
PRODUCER_PROCEDURES = ("worker_namespace", "producer_queue", "task_submit", "task_submit_many")
CREDENTIAL_ID = re.compile(r"^[0-9a-f]{16}$")
ACCOUNT_NAME = re.compile(r"^[A-Za-z0-9_]{1,32}$")
HOST_PATTERN = re.compile(r"^[A-Za-z0-9_.%:-]{1,60}$")


def worker_account(
    dsn: str, args: argparse.Namespace, procedures: tuple[str, ...] = WORKER_PROCEDURES
) -> dict:
    """Create (or re-grant) a MySQL account that may only EXECUTE ``procedures`` (the worker
    procedures, or PRODUCER_PROCEDURES), bound to the namespace named by ``args`` (L4): the
    procedures refuse it any other. Run again with another namespace, the account is bound to
    that one too; every run sets a new password. STATE_CONFLICT for a user name that a MySQL
    account has which this command did not make."""
    check_names(args)
    if not ACCOUNT_NAME.match(args.user) or not HOST_PATTERN.match(args.host):
        raise errors.InvalidArgument("user must be [A-Za-z0-9_]{1,32}; host a host pattern")
    password = secrets.token_urlsafe(24)
    settings = db.parse_dsn(dsn)
    database = Database(dsn, pool_size=1)
    try:
        # Only an account this command made is made again: any other of that name (the
        # server's own, root) would get a new password, keep its grants, and be held to one
        # namespace by worker_account_check, which knows accounts by user name alone.
        [found] = database.query(
            "SELECT (SELECT COUNT(*) FROM mysql.user WHERE User = %s) AS accounts,"
            " (SELECT COUNT(*) FROM worker_accounts WHERE account_user = %s) AS bound",
            (args.user, args.user),
        )
        if found["accounts"] and not found["bound"]:
            raise errors.StateConflict(
                f"a MySQL account named {args.user} exists and orbit-admin did not make it; "
                "its password and grants are left alone: choose another --user"
            )
        # Bound first: a namespace that does not exist leaves no account behind.
        [[bound]] = database.call(
            "worker_account_bind", args.user, args.application, args.environment, args.namespace
        )
        # The routines are versioned (schema.py): the grants name the database's latest, the
        # version the account's workers call; orbit-migrate up grants each newer one.
        granted = [database.routine(procedure) for procedure in procedures]
    finally:
        database.close()
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (args.user, args.host, password)
            )
            cur.execute("ALTER USER %s@%s IDENTIFIED BY %s", (args.user, args.host, password))
            for name in granted:
                cur.execute(
                    f"GRANT EXECUTE ON PROCEDURE `{settings['database']}`.`{name}` TO %s@%s",
                    (args.user, args.host),
                )
            cur.execute(  # where its workers read which version is the latest
                f"GRANT SELECT ON `{settings['database']}`.`orbit_meta` TO %s@%s",
                (args.user, args.host),
            )
    finally:
        conn.close()
    worker_dsn = (
        f"mysql://{args.user}:{quote(password, safe='')}@{settings['host']}:"
        f"{settings['port']}/{settings['database']}"
    )
    if "ssl_ca" in settings:  # the worker reaches the same server the same way
        worker_dsn += "?ssl_ca=" + quote(settings["ssl_ca"], safe="/")
    document = {
        "user": args.user,
        "host": args.host,
        "password": password,
        "dsn": worker_dsn,
        "procedures": list(procedures),
        "application": args.application,
        "environment": args.environment,
        "namespace": args.namespace,
        "namespaces_bound": bound["namespaces"],
    }
    _write_private(Path(args.output), document)
    return document


def _write_private(output: Path, document: dict) -> None:
    # Create with 0600 from the start: a secret must never be readable by others.
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
    os.chmod(output, 0o600)


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1_000_000_000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000000000")
    return value


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
    for name, what in (("worker-account", "worker"), ("producer-account", "submission")):
        account = sub.add_parser(
            name, help=f"create a MySQL account that may only run the {what} procedures"
        )
        account.add_argument("--user", required=True)
        account.add_argument("--host", default="%")
        account.add_argument("--application", required=True)
        account.add_argument("--environment", required=True)
        account.add_argument(
            "--namespace", required=True, help="the namespace it may act for (run again to add one)"
        )
        account.add_argument("--output", required=True, help="JSON file (0600) with the password")
    cred = sub.add_parser(
        "credential", help="create a credential of an existing namespace with chosen scopes"
    )
    cred.add_argument("--application", required=True)
    cred.add_argument("--namespace", required=True)
    cred.add_argument("--environment", required=True)
    cred.add_argument(
        "--scopes", required=True, help=f"comma-separated, some of {', '.join(auth.SCOPES)}"
    )
    cred.add_argument(
        "--queue-ids", default=None, help="comma-separated queue ids (default: every queue)"
    )
    cred.add_argument("--label", default="")
    cred.add_argument("--output", required=True, help="JSON file (0600) with the token")
    revoke = sub.add_parser("revoke", help="refuse a credential from its next request on")
    revoke.add_argument(
        "--credential-id", required=True, help="credential_id of its file (16 hex of the token)"
    )
    quota = sub.add_parser("set-quota", help="set an application's quotas (omit = unlimited)")
    quota.add_argument("--application", required=True)
    quota.add_argument("--max-active-attempts", type=_positive, default=None)
    quota.add_argument("--max-unfinished", type=_positive, default=None)
    promote = sub.add_parser(
        "promote",
        help="make a replica the primary; its tokens start above every earlier one",
        description=promotion.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    promote.add_argument("--target", required=True, help="DSN (admin account) of the replica")
    promote.add_argument("--old-primary", help="DSN of the primary it replaces, to fence it")
    promote.add_argument(
        "--replica", action="append", default=[], help="DSN of another replica to re-point"
    )
    promote.add_argument("--repl-user", help="replication account the replicas connect with")
    promote.add_argument("--repl-password", default="")
    promote.add_argument(
        "--epoch-file", type=Path, help="where the last epoch given out is kept (read, written)"
    )
    promote.add_argument("--wait", type=_positive, default=30, help="seconds to wait to catch up")
    promote.add_argument(
        "--old-primary-lost",
        action="store_true",
        help="the operator's word that the old primary is gone for good and will not write "
        "again; needed when it is not named or does not answer",
    )
    raise_epoch = sub.add_parser(
        "raise-epoch",
        help="raise a primary's token epoch (after a restore from backup, before traffic)",
        description=promotion.raise_epoch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    raise_epoch.add_argument("--target", required=True, help="DSN (admin account) of the server")
    raise_epoch.add_argument(
        "--epoch-file", type=Path, help="where the last epoch given out is kept (read, written)"
    )
    retention.add_commands(sub)
    key_policy.add_command(sub)
    args = parser.parse_args(argv)
    if args.command in ("promote", "raise-epoch"):
        try:
            if args.command == "raise-epoch":
                promotion.raise_epoch(args.target, args.epoch_file)
            else:
                promotion.promote(
                    args.target,
                    args.old_primary,
                    tuple(args.replica),
                    args.repl_user,
                    args.repl_password,
                    args.epoch_file,
                    args.wait,
                    old_primary_lost=args.old_primary_lost,
                )
        except (promotion.PromoteError, pymysql.MySQLError, ValueError) as exc:
            print(f"orbit-admin {args.command}: {exc}", file=sys.stderr)
            return 1
        return 0
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not dsn:
        print("orbit-admin: ORBIT_MYSQL_DSN is not set", file=sys.stderr)
        return 2
    try:
        db.parse_servers(dsn)
    except ValueError as exc:
        print(f"orbit-admin: {exc}", file=sys.stderr)
        return 2
    if args.command in ("worker-account", "producer-account"):
        producer = args.command == "producer-account"
        try:
            worker_account(dsn, args, PRODUCER_PROCEDURES if producer else WORKER_PROCEDURES)
        except errors.OrbitError as exc:
            print(f"orbit-admin: {exc.code}: {exc.message}", file=sys.stderr)
            return 1
        except pymysql.MySQLError as exc:
            print(f"orbit-admin: {exc}", file=sys.stderr)
            return 1
        kind = "producer" if producer else "worker"
        print(f"{kind} account {args.user}@{args.host} -> {args.output}")
        return 0
    database = Database(dsn)
    try:
        print(COMMANDS[args.command](database, args))
    except errors.OrbitError as exc:
        print(f"orbit-admin: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        database.close()
    return 0


def _bootstrap(database: Database, args: argparse.Namespace) -> str:
    document = bootstrap(database, args)
    return (
        f"bootstrapped {document['application']}/{document['environment']}/"
        f"{document['namespace']} queue {document['queue_id']} -> {args.output}"
    )


def _credential(database: Database, args: argparse.Namespace) -> str:
    document = create_credential(database, args)
    scopes = ",".join(document["scopes"])
    return f"credential {document['credential_id']} ({scopes}) -> {args.output}"


def _revoke(database: Database, args: argparse.Namespace) -> str:
    if not CREDENTIAL_ID.match(args.credential_id):
        raise errors.InvalidArgument("a credential id is 16 lowercase hex characters")
    [[row]] = database.call("credential_revoke", args.credential_id)
    return json.dumps(row, default=str)


def _set_quota(database: Database, args: argparse.Namespace) -> str:
    check_names(args)
    [[row]] = database.call(
        "application_set_quota", args.application, args.max_active_attempts, args.max_unfinished
    )
    return json.dumps(row)


# The commands that call one procedure through the pool; each returns the line it prints.
COMMANDS = {
    "bootstrap": _bootstrap,
    "credential": _credential,
    "revoke": _revoke,
    "set-quota": _set_quota,
    "retention": lambda database, args: _named(retention.retention, database, args),
    "cleanup": lambda database, args: _named(retention.run_cleanup, database, args),
    "key-policy": lambda database, args: _named(key_policy.run, database, args),
}


def _named(command, database: Database, args: argparse.Namespace) -> str:
    check_names(args)
    return command(database, args)
