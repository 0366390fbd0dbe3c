"""``orbit-admin key-policy`` (P1, P3): list a namespace's key policies, or set or delete the
one of a key or a prefix. Checked as the API checks a policy, written by the same procedure,
so a change reaches the keys it covers at once."""

from __future__ import annotations

import argparse
import json

from orbit_shell import errors, policy_shapes
from orbit_shell.cli.retention import namespace_id
from orbit_shell.engine.db import Database
from orbit_shell.server import policies


def add_command(sub) -> None:
    command = sub.add_parser(
        "key-policy",
        help="list key policies, or set or delete the limit of a key or a prefix (P1)",
    )
    command.add_argument("--application", required=True)
    command.add_argument("--environment", required=True)
    command.add_argument("--namespace", required=True)
    match = command.add_mutually_exclusive_group()
    match.add_argument("--key", help="the exact key the policy is for")
    match.add_argument("--prefix", help="the key prefix the policy is for")
    change = command.add_mutually_exclusive_group()
    change.add_argument("--limit", type=int, help="holders its keys admit at once, 1 to 1000")
    command.add_argument(
        "--rate",
        help="PERMITS/SECONDS: at most PERMITS permits of a key begin in any SECONDS (P6)",
    )
    change.add_argument("--delete", action="store_true", help="delete the policy")


def run(database: Database, args: argparse.Namespace) -> str:
    """Without --key or --prefix: the policies, one JSON line each. With one: --limit (and
    --rate, or none) sets its policy, created or changed, --delete deletes it; prints the
    policy as JSON."""
    if args.rate is not None and args.limit is None:
        raise errors.InvalidArgument("--rate goes with --limit")
    ns = namespace_id(database, args)
    if args.key is None and args.prefix is None:
        if args.limit is not None or args.delete:
            raise errors.InvalidArgument("--limit and --delete need --key or --prefix")
        return "\n".join(json.dumps(policies.serialize(r)) for r in policies.listed(database, ns))
    kind = "KEY" if args.key is not None else "PREFIX"
    pattern = args.key if args.key is not None else args.prefix
    found = [
        r
        for r in policies.listed(database, ns)
        if (r["match_kind"], r["pattern"]) == (kind, pattern)
    ]
    if args.delete:
        if not found:
            raise errors.NotFound("key policy not found")
        database.call(
            "key_policy_write", ns, found[0]["policy_id"], None, None, None, None, None, 1
        )
        return json.dumps({"policy_id": found[0]["policy_id"], "deleted": True})
    if args.limit is None:
        raise errors.InvalidArgument("give --limit or --delete")
    given = {kind.lower(): pattern, "limit": args.limit}
    if args.rate is not None:
        permits, _, seconds = args.rate.partition("/")
        if not (permits.isdigit() and seconds.isdigit()):
            raise errors.InvalidArgument("--rate is PERMITS/SECONDS, such as 10/60")
        given["rate"] = {"permits": int(permits), "per_seconds": int(seconds)}
    body = policy_shapes.KEY_POLICY.parse(given)
    existing = found[0]["policy_id"] if found else None
    write = policy_shapes.write_args(body)
    [[row]] = database.call("key_policy_write", ns, existing, *write, 0)
    return json.dumps(policies.serialize(row))
