"""``orbit-worker MODULE:ATTR``: run the SDK worker a module declares, the way Celery, RQ and
Procrastinate start theirs.

The module makes a :class:`~orbit_shell.sdk.worker.Worker` and registers its handlers on it;
where the server is, and with which credential, comes from the flags or the environment::

    # myapp/tasks.py
    from orbit_shell.sdk.worker import Worker

    worker = Worker(capacity=8)

    @worker.handler("object.update", "v1")
    def update(event):
        ...

    $ export ORBIT_URL=http://127.0.0.1:8080 ORBIT_CREDENTIALS_FILE=creds.json
    $ orbit-worker myapp.tasks:worker

Each task's outcome is logged at INFO as one JSON line; SIGTERM or SIGINT drains (no more
claims, in-flight work finishes, goodbye) and the command exits 0 when everything finished.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from pathlib import Path

from orbit_shell import logs
from orbit_shell.sdk.worker import Worker

log = logging.getLogger("orbit.worker")


def load(target: str) -> Worker:
    """The Worker named by ``module:attribute`` (the current directory is importable).

    Raises:
        ValueError: the target is not of that form, or does not name a Worker.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{target!r}: give MODULE:ATTRIBUTE, e.g. myapp.tasks:worker")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(found, Worker):
        raise ValueError(f"{target!r} is not an orbit_shell.sdk.worker.Worker")
    return found


def _credentials(path: str | None) -> dict:
    if not path:
        return {}
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:  # the file names the error: the message alone did not
        raise ValueError(f"{path}: not an Orbit credentials file (not JSON: {exc})") from None
    if not isinstance(document, dict) or "token" not in document:
        raise ValueError(f"{path}: not an Orbit credentials file (no token)")
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="orbit-worker",
        description=__doc__.split("\n\n", 1)[0],
        epilog="Environment: ORBIT_URL, ORBIT_CREDENTIALS_FILE (orbit-admin's JSON file: token "
        "and queue_id), ORBIT_TOKEN (instead of the file). Flags win over the environment.",
    )
    parser.add_argument("target", help="MODULE:ATTRIBUTE naming an orbit_shell Worker")
    parser.add_argument("--url", default=os.environ.get("ORBIT_URL"))
    parser.add_argument("--credentials", default=os.environ.get("ORBIT_CREDENTIALS_FILE"))
    parser.add_argument(
        "--queue",
        action="append",
        default=[],
        help="a queue id to claim from (repeat for more); default: the worker's own, else the "
        "credentials file's queue_id",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logs.configure(args.log_level.upper())
    try:
        worker = load(args.target)
        creds = _credentials(args.credentials)
        token = os.environ.get("ORBIT_TOKEN") or creds.get("token")
        if worker.transport is None:
            if not args.url or not token:
                raise ValueError(
                    "where is the server? give --url (ORBIT_URL) and --credentials "
                    "(ORBIT_CREDENTIALS_FILE) or ORBIT_TOKEN"
                )
            worker.connect(args.url, token)
        if args.queue:
            worker.queue_ids = list(args.queue)
        elif not worker.queue_ids and creds.get("queue_id"):
            worker.queue_ids = [creds["queue_id"]]
        if not worker.handlers:
            raise ValueError(f"{args.target} has no handlers registered")
    except (ValueError, ImportError, OSError) as exc:
        print(f"orbit-worker: {exc}", file=sys.stderr)
        return 2
    log.info(
        "worker starting",
        extra={
            "action": "worker.start",
            "worker_id": worker.worker_id,
            "queues": worker.queue_ids,
            "handlers": sorted(f"{n}@{v}" for n, v in worker.handlers),
        },
    )
    try:
        worker.run(install_signals=True)
    except ValueError as exc:
        print(f"orbit-worker: {exc}", file=sys.stderr)
        return 2
    return 0 if worker.drained else 1
