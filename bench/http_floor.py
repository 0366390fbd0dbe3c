"""The floor under the unbatched e2e target: one ``POST /v1/tasks`` per task, served the way
``orbit`` serves it, doing the least a durable submission can.

Not Orbit. Run as a program (``start`` does), it serves gunicorn with ``orbit``'s own settings
and worker class (gevent, the same number of workers) in front of a Falcon app whose ``POST
/v1/tasks`` reads the JSON body, calls the floor's ``submit`` (``bench/floor.py``: a task row
and a history row in one transaction) through the same :meth:`Database.call`, and answers 201
with a task in the envelope. No credential, idempotency record, key, quota or input check: what
SPEC asks beyond those two rows is left out. ``submit_only`` sends the same requests from the
same producers (the SDK client's ``submit_task``, 8 threads) to a server and times them, with
no worker running; run against Orbit and against this floor in one invocation, the ratio says
what Orbit's submission costs beyond the least, and the floor's own rate bounds what any design
of this shape submits one request at a time on this machine.

The **SPEC floor** variant (``spec_serving``) does the least SPEC asks of ``POST /v1/tasks``:
the bearer token parsed and hashed, the Idempotency-Key and body checked, the request's
fingerprint, and ``spec_submit_as`` (``bench/spec_floor.py``: the credential, its scope and the
queue read in one statement, the key looked up and recorded, task and history rows, a 201 or a
replay's 200 with the receipt). Beside Orbit and the floor, it says how much of what Orbit
spends beyond the floor any design that does what SPEC asks spends too. It also serves ``POST
/v1/floor/turn``, the worker round of the SPEC floor's whole task (``bench/spec_floor_e2e.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import falcon  # noqa: E402
import floor  # noqa: E402
import spec_floor  # noqa: E402
from e2e import start_server  # noqa: E402
from measures import cpu_sample, wait_turn  # noqa: E402

from orbit_shell import errors, validation  # noqa: E402
from orbit_shell.cli.server import OrbitServer  # noqa: E402
from orbit_shell.engine import db  # noqa: E402
from orbit_shell.sdk.client import Client  # noqa: E402
from orbit_shell.sdk.models import SubmitTaskRequest  # noqa: E402
from orbit_shell.server.auth import bearer  # noqa: E402
from orbit_shell.server.config import Config  # noqa: E402


class FloorSubmit:
    """``POST /v1/tasks``: one floor submission per request."""

    def __init__(self, database, routine: str) -> None:
        self.db, self.routine = database, routine

    def on_post(self, req, resp) -> None:
        body = req.get_media()
        self.db.call(self.routine, 1)
        resp.status = falcon.HTTP_201
        resp.media = {
            "data": {
                "task_id": secrets.token_hex(16),
                "queue_id": body["queue_id"],
                "state": "WAITING",
                "handler": body["handler"],
                "handler_version": body["handler_version"],
                "priority": body.get("priority", 5),
            },
            "request_id": secrets.token_hex(16),
        }


IDEMPOTENCY_KEY = re.compile(r"^[\x20-\x7e]{1,255}$")  # SPEC's rule, without Orbit's own


def _text(body: dict, name: str, most: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= most:
        raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description=name)
    return value


def _bearer(req) -> tuple[str, str]:
    """The request's token as its credential public id and SHA-256, or 401."""
    try:
        return bearer(req.get_header("Authorization"))
    except errors.OrbitError as exc:
        raise falcon.HTTPUnauthorized(title="UNAUTHENTICATED") from exc


class SpecSubmit:
    """``POST /v1/tasks``: the least SPEC asks of a submission (the module's docstring)."""

    def __init__(self, database, routine: str) -> None:
        self.db, self.routine = database, routine

    def on_post(self, req, resp) -> None:
        credential, sha256 = _bearer(req)
        key = req.get_header("Idempotency-Key") or ""
        if not IDEMPOTENCY_KEY.match(key):
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="Idempotency-Key")
        body = req.get_media()
        if not isinstance(body, dict) or "payload" not in body:
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="body")
        queue = _text(body, "queue_id", 32)
        if not validation.HEX32.match(queue):
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="queue_id")
        handler = _text(body, "handler", 200)
        versions = _text(body, "handler_version", 64), _text(body, "payload_version", 64)
        priority = body.get("priority", 5)
        if type(priority) is not int or not 0 <= priority <= 9:
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="priority")
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        fingerprint = hashlib.sha256(canonical.encode()).hexdigest()
        try:
            [[row]] = self.db.call(
                self.routine, credential, sha256, queue, key, fingerprint,
                json.dumps(body["payload"]), handler, *versions, priority,
            )  # fmt: skip
        except errors.OrbitError as exc:
            raise falcon.HTTPError(exc.status, title=exc.code) from exc
        resp.status = falcon.HTTP_201 if row["created"] else falcon.HTTP_200
        resp.media = {
            "data": {
                "task_id": row["task_id"],
                "queue_id": queue,
                "state": row["state"],
                "handler": handler,
                "handler_version": versions[0],
                "payload_version": versions[1],
                "priority": priority,
                "created_at": row["created_at"].isoformat() + "Z",
            },
            "request_id": secrets.token_hex(16),
        }


class SpecTurn:
    """``POST /v1/floor/turn``: a floor worker's round, its results and its next claim in one
    call of ``spec_turn`` (``bench/spec_floor_e2e.py``), the body checked as SPEC asks."""

    def __init__(self, database, routine: str) -> None:
        self.db, self.routine = database, routine

    def on_post(self, req, resp) -> None:
        credential, sha256 = _bearer(req)
        body = req.get_media()
        if not isinstance(body, dict):
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="body")
        session = _text(body, "session_id", 32)
        results, most = body.get("results"), body.get("max")
        if not isinstance(results, list) or len(results) > 100:
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="results")
        if type(most) is not int or not 0 <= most <= 100:
            raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="max")
        items = []
        for item in results:
            if not isinstance(item, dict) or not validation.HEX32.match(
                str(item.get("attempt_id"))
            ):
                raise falcon.HTTPBadRequest(title="INVALID_ARGUMENT", description="attempt_id")
            result = item.get("result")
            items.append({"attempt_id": item["attempt_id"],
                          "result": None if result is None else json.dumps(result)})  # fmt: skip
        try:
            [rows] = self.db.call(
                self.routine, credential, sha256, session, json.dumps(items), most
            )
        except errors.OrbitError as exc:
            raise falcon.HTTPError(exc.status, title=exc.code) from exc
        resp.media = {
            "data": {
                "attempts": [
                    {
                        "attempt_id": r["attempt_id"],
                        "attempt_number": r["number"],
                        "lease_expires_at": r["lease_expires"].isoformat() + "Z",
                        "task": {
                            "task_id": r["task_id"],
                            "handler": r["handler"],
                            "handler_version": r["handler_version"],
                            "payload": json.loads(r["payload"]),
                        },
                    }
                    for r in rows
                ]
            },
            "request_id": secrets.token_hex(16),
        }


class FloorServer(OrbitServer):
    """``orbit``'s gunicorn settings and worker class, serving the floor app (``FLOOR_KIND``
    ``spec``: the SPEC floor's)."""

    def load(self):
        from orbit_shell.engine.db import Database

        app = falcon.App()
        floor = os.environ["FLOOR_DATABASE"]
        database = Database(self.config.dsn)
        if os.environ.get("FLOOR_KIND") == "spec":
            app.add_route("/v1/tasks", SpecSubmit(database, f"{floor}.spec_submit_as"))
            app.add_route("/v1/floor/turn", SpecTurn(database, f"{floor}.spec_turn"))
        else:
            app.add_route("/v1/tasks", FloorSubmit(database, f"{floor}.submit"))
        app.add_route("/readyz", Ready())
        return app


class Ready:
    def on_get(self, req, resp) -> None:
        resp.media = {"data": {"ready": True}}


def start(
    dsn: str, floor_database: str, workers: int, kind: str = "floor"
) -> tuple[subprocess.Popen, str]:
    """Run ``python bench/http_floor.py`` (the floor server, or the SPEC floor's: ``kind``
    ``spec``) on a free port; its URL."""
    return start_server(
        dsn,
        workers,
        command=[sys.executable, __file__],
        env={
            "ORBIT_SWEEP_INTERVAL": "0",
            "ORBIT_SCHEDULE_INTERVAL": "0",
            "FLOOR_DATABASE": floor_database,
            "FLOOR_KIND": kind,
        },
        name="bench-floor-server",
    )


def single_submissions(url: str, token: str, queue_id: str, tasks: int, producers: int,
                       connect=None, rate: float = 0.0) -> Callable[[int], None]:  # fmt: skip
    """The producers' loop: thread ``i`` of ``producers`` submits every ``producers``-th of
    ``tasks`` no-op tasks to ``queue_id``, one request each, through its own client (the SDK's
    HTTP client, or ``connect()``'s); at ``rate`` tasks/s in all when it is set, interleaved
    as the e2e part's producers pace theirs, from when the loop is made."""
    began = time.monotonic()

    def produce(i: int) -> None:
        c = connect() if connect else Client(url, token)
        for k, n in enumerate(range(i, tasks, producers)):
            if rate:
                wait_turn(began, k, i, producers, rate)
            request = SubmitTaskRequest(
                queue_id=queue_id,
                handler="noop",
                handler_version="v1",
                payload_version="v1",
                payload={"n": n},
            )
            c.submit_task(f"only-{queue_id}-{n}", request)
        c.close()

    return produce


def submit_only(
    url: str, token: str, queue_id: str, tasks: int, producers: int, run_threads, connect=None
) -> dict[str, float]:
    """``tasks`` single submissions from ``producers`` threads, no worker running: tasks/s, and
    the machine's CPU per task (every process: server, database and producers), and the
    database's. ``connect()`` gives each thread its client instead of the HTTP one (the
    direct producer: ``url`` and ``token`` are then unused)."""

    before = cpu_sample()
    began = time.monotonic()
    run_threads(single_submissions(url, token, queue_id, tasks, producers, connect), producers)
    seconds = time.monotonic() - began
    after = cpu_sample()
    return {
        "per_s": tasks / seconds,
        "cpu_ms_per_task": (after[0] - before[0]) * 1000 / tasks,
        "mariadbd_cpu_ms_per_task": (after[2] - before[2]) * 1000 / tasks,
        "cpu_busy_pct": 100 * (after[0] - before[0]) / (after[1] - before[1]),
    }


@contextlib.contextmanager
def _served(
    dsn: str, database, scratch: str, workers: int, kind: str = "floor"
) -> Iterator[tuple[subprocess.Popen, str]]:
    """The floor server of ``kind`` on the scratch database ``scratch`` for the block:
    ``(its Popen, its URL)``; it is stopped and the database dropped afterwards."""
    proc, url = start(dsn, scratch, workers, kind)
    try:
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(30)
        database.query(f"DROP DATABASE `{scratch}`")


def serving(dsn: str, database, workers: int = 4):
    """A floor server for the block, on the server of ``dsn`` (``_served``), its scratch
    database made by ``floor.install``."""
    return _served(dsn, database, floor.install(dsn), workers)


def spec_install(
    dsn: str,
    token: str,
    queue_id: str,
    ddl=spec_floor.DDL,
    scopes: str = "tasks:submit",
    sessions: Sequence[str] = (),
    capacity: int = 100,
) -> str:
    """The SPEC floor's scratch database (``ddl``) with one application, the queue
    ``queue_id``, ``token``'s credential of ``scopes`` and a worker session of ``capacity`` on
    the queue per public id in ``sessions``; its name."""
    scratch = floor.install(dsn, ddl)
    public_id, sha256 = bearer(f"Bearer {token}")
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{scratch}`.spec_apps VALUES (1, NULL, NULL)")
            cur.execute(
                f"INSERT INTO `{scratch}`.spec_queues VALUES (1, 1, NULL, NULL, 30, %s)",
                (queue_id,),
            )
            cur.execute(
                f"INSERT INTO `{scratch}`.spec_credentials (public_id, app, secret_sha256, scopes)"
                " VALUES (%s, 1, %s, %s)",
                (public_id, sha256, scopes),
            )
            for n, session in enumerate(sessions, start=1):
                cur.execute(
                    f"INSERT INTO `{scratch}`.spec_sessions"
                    " VALUES (%s, %s, 1, %s, 0, UTC_TIMESTAMP(6))",
                    (n, session, capacity),
                )
        conn.commit()
    finally:
        conn.close()
    return scratch


def spec_serving(dsn: str, database, token: str, queue_id: str, workers: int = 4):
    """A SPEC floor server for the block (``_served``), accepting ``token``
    (``tasks:submit``) for the queue ``queue_id``."""
    return _served(dsn, database, spec_install(dsn, token, queue_id), workers, "spec")


def floor_submissions(
    dsn: str,
    database,
    token: str,
    queue_id: str,
    tasks: int,
    producers: int,
    run_threads,
    kind: str = "floor",
) -> dict[str, float]:
    """``submit_only`` against a floor server started for the call (``serving``; ``kind``
    ``spec``: ``spec_serving``)."""
    if kind == "spec":
        serve = spec_serving(dsn, database, token, queue_id)
    else:
        serve = serving(dsn, database)
    with serve as (_, url):
        return submit_only(url, token, queue_id, tasks, producers, run_threads)


if __name__ == "__main__":
    FloorServer(Config.from_env()).run()
