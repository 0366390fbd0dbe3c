"""Faults against the real server, real worker processes and a real MariaDB.
Each test prints its figures (run pytest with -s to see them)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devtools import localdb
from orbit_shell import errors
from orbit_shell.engine import db, schema
from orbit_shell.engine.db import Database
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.fence import SqlFencedStore
from orbit_shell.sdk.models import SubmitTaskRequest
from tests.acceptance.procs import SPAWNED, spawn
from tests.conftest import make_tenant
from tests.engine import Engine
from tests.history import Grant, History, Write, recorded

SETTLED = {"SUCCEEDED", "FAILED", "CANCELLED", "DEADLINE_EXCEEDED", "NEEDS_REVIEW"}


@pytest.fixture
def fence(server):
    name = "fence_" + secrets.token_hex(3)
    dsn = server.create_database(name)
    yield dsn
    server.drop_database(name)


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def submit(client, queue_id, key, idem=None):
    return client.submit_task(
        idem or secrets.token_hex(8),
        SubmitTaskRequest(
            queue_id=queue_id,
            handler="object.update",
            handler_version="v1",
            payload_version="v1",
            payload={},
            concurrency_key=key,
        ),
    ).task.task_id


def test_sigstop_holder_past_its_lease_then_sigcont_is_refused_everywhere(
    orbit_server, tenant, fence
):
    store = SqlFencedStore(fence, tenant.namespace)
    store.ensure_schema()
    client = Client(orbit_server, tenant.token)
    queue = client.create_queue("sigstop", lease_seconds=2).queue_id
    task = submit(client, queue, "object/stopped")
    old = spawn(orbit_server, tenant, queue, fence, sleep=1.0, value="old")
    wait_for(lambda: any(x.startswith("started") for x in old.lines), what="old start")
    old.send_signal(signal.SIGSTOP)  # paused past its lease: GC pause, partition, ...
    wait_for(lambda: client.get_task(task).state == "NEEDS_REVIEW", what="recovery")
    client.resolve_task(task, "WAITING")
    new = spawn(orbit_server, tenant, queue, fence, value="new")
    wait_for(lambda: client.get_task(task).state == "SUCCEEDED", what="new holder")
    old.send_signal(signal.SIGCONT)  # wakes up and carries on as if it still held the key
    wait_for(lambda: any(x.startswith("stale") for x in old.lines), what="the old holder's write")
    time.sleep(1.0)  # its result and renewals reach the server too
    for proc in (old, new):
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    attempts = client.list_attempts(task)
    assert [a.state for a in attempts] == ["UNKNOWN", "SUCCEEDED"]
    assert store.state("object/stopped") == {
        "highest_token": attempts[1].concurrency_token,
        "value": "new",
    }
    assert client.get_task(task).state == "SUCCEEDED"  # the late result changed nothing
    print("\nsigstop: grants=2 stale_writes_attempted=1 rejected=1 overlaps=0 lost=0")


def client_history(procs, limit_of=lambda key: 1) -> History:
    """Grants as the worker processes saw them: from a handler's start (after Start was
    confirmed) to its accepted fenced write, on the shared monotonic clock. That interval lies
    inside the real holding interval, so two of them overlapping on one slot of a key, or more
    of them at once than the key's limit (``limit_of``), would prove a double grant. Handlers
    whose write was refused as stale held nothing valid and are left out."""
    started, history = {}, History(starts_are_grants=False)
    for proc in procs:
        for line in proc.lines:
            kind, *fields = line.split()
            if kind == "started":
                started[fields[0]] = float(fields[3])
            elif kind == "wrote":
                attempt, token, key, at, slot = fields
                history.grants.append(
                    Grant(
                        key,
                        int(token),
                        attempt,
                        "",
                        started[attempt],
                        float(at),
                        int(slot),
                        limit_of(key),
                    )
                )
    return history


def kill_connections(dsn: str) -> int:
    """KILL CONNECTION every other session on the Orbit database (servers, sweepers, tests)."""
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
                "AND id <> CONNECTION_ID()"
            )
            ids = [r["id"] for r in cur.fetchall()]
            for victim in ids:
                try:
                    cur.execute(f"KILL CONNECTION {int(victim)}")
                except Exception:  # noqa: BLE001 - it may have ended on its own meanwhile
                    pass
        return len(ids)
    finally:
        conn.close()


def _history(database, tenant, submitted, fence_dsn, limit_of=lambda key: 1) -> History:
    history = History(submitted=set(submitted))
    for r in database.query(
        "SELECT t.public_id AS task, t.concurrency_key AS k, a.public_id AS attempt, "
        "a.concurrency_token AS token, a.concurrency_slot AS slot, a.created_at, a.finished_at "
        "FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.namespace_id = %s "
        "AND t.concurrency_key <> ''",
        (tenant.namespace_id,),
    ):
        history.grants.append(recorded(r, limit_of(r["k"])))
    for r in database.query(
        "SELECT public_id, state FROM tasks WHERE namespace_id = %s", (tenant.namespace_id,)
    ):
        history.final_states[r["public_id"]] = r["state"]
    for r in database.query(
        "SELECT t.public_id, COUNT(*) AS n FROM attempts a JOIN tasks t ON "
        "t.id = a.task_id WHERE t.namespace_id = %s AND a.state = 'SUCCEEDED' "
        "GROUP BY t.public_id",
        (tenant.namespace_id,),
    ):
        history.successes[r["public_id"]] = r["n"]
    conn = db.connect(fence_dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT resource_key, slot, token, seq FROM fence_operations")
        history.writes = [
            Write(r["resource_key"], r["token"], r["seq"], True, r["slot"]) for r in cur.fetchall()
        ]
    conn.close()
    return history


CHAOS_TASKS = int(os.environ.get("ORBIT_CHAOS_TASKS", "24"))
CHAOS_KEYS = int(os.environ.get("ORBIT_CHAOS_KEYS", "3"))
CHAOS_KILLS = int(os.environ.get("ORBIT_CHAOS_KILLS", "1"))
CHAOS_SLEEP = float(os.environ.get("ORBIT_CHAOS_SLEEP", "0.2"))
# Seconds between submissions after the first tenth: keys fall idle between their tasks and
# are reclaimed (key window 0) and made again while workers are killed.
CHAOS_GAP = float(os.environ.get("ORBIT_CHAOS_GAP", "0.15"))


class Reclaimer(threading.Thread):
    """The leader's cleanup, as often as it can go: every idle key row of the namespace is
    deleted (R5) while the run goes on, its stripe's floor raised first."""

    def __init__(self, database, namespace_id: int) -> None:
        super().__init__(daemon=True)
        self.database, self.namespace_id = database, namespace_id
        self.stopped = threading.Event()
        self.reclaimed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        from orbit_shell.server import cleanup

        while not self.stopped.wait(0.05):
            try:
                self.reclaimed += cleanup.run_pass(
                    self.database, self.namespace_id, pause=0, duty=1
                )["concurrency_resources"]
            except errors.Unavailable:  # its connection killed with the others: next pass
                continue
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                self.error = exc
                return


def test_mixed_run_with_sigkill_passes_the_history_checker(orbit_server, tenant, database, fence):
    """Short in CI; `tests/chaos/run --long` runs it with 10,000 tasks and repeated kills.
    Every other key admits 3 holders: the checker holds each slot to one holder at a time and
    each key to its limit.
    Key rows are reclaimed as soon as they are idle (key window 0), and nine tenths of the
    tasks are submitted while the run goes on, slower than the workers run them, so keys are
    deleted and made again between their tasks: the checker's "tokens strictly increasing
    per key" holds across every deletion (R5)."""
    SqlFencedStore(fence, tenant.namespace).ensure_schema()
    client = Client(orbit_server, tenant.token, retries=8)
    queue = client.create_queue("mixed", lease_seconds=2).queue_id
    # Every other key admits 3 holders (P1): its permits hold slots 0-2, fenced per slot.
    client.set_key_policy(3, prefix="mixed/pool/")

    def key_of(i: int) -> str:
        k = i % CHAOS_KEYS
        return f"mixed/{'pool' if k % 2 else 'one'}/{k}"

    def limit_of(key: str) -> int:
        return 3 if key.startswith("mixed/pool/") else 1

    database.call("namespace_retention", tenant.namespace_id, None, 0)
    reclaimer = Reclaimer(database, tenant.namespace_id)
    reclaimer.start()
    first = CHAOS_TASKS // 10  # the first tenth at once, the rest while the run goes on
    submitted = [submit(client, queue, key_of(i)) for i in range(first)]

    def produce() -> None:
        for i in range(first, CHAOS_TASKS):
            time.sleep(CHAOS_GAP)
            submitted.append(submit(client, queue, key_of(i)))

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    # One worker of each kind, and every replacement alternates: with prefetch, a killed
    # worker also leaves leased attempts that never started (they must expire, not run twice).
    workers = [
        spawn(orbit_server, tenant, queue, fence, sleep=CHAOS_SLEEP, prefetch=n) for n in (0, 2)
    ]
    kills = 0

    def settled():
        nonlocal kills
        states, cursor = {}, None
        while True:
            page = client.list_tasks(queue_id=queue, limit=200, cursor=cursor)
            states.update({t.task_id: t.state for t in page.tasks})
            cursor = page.next_cursor
            if not cursor:
                break
        for task_id, state in states.items():
            if state == "NEEDS_REVIEW":  # an operator checks the resource and re-runs it
                client.resolve_task(task_id, "WAITING")
        done = not producer.is_alive() and all(s == "SUCCEEDED" for s in states.values())
        if not done and kills < CHAOS_KILLS and time.monotonic() > next_kill[0]:
            victim = workers.pop(0)
            victim.send_signal(signal.SIGKILL)  # mid-task, most likely
            victim.wait(10)
            ahead = 2 * (kills % 2)
            workers.append(
                spawn(orbit_server, tenant, queue, fence, sleep=CHAOS_SLEEP, prefetch=ahead)
            )
            db_kills[0] += kill_connections(database.dsn)  # mid-procedure, for some of them
            kills += 1
            next_kill[0] = time.monotonic() + 3.0
        return done

    next_kill = [time.monotonic() + 2.0]
    db_kills = [0]
    wait_for(
        settled,
        timeout=max(90.0, CHAOS_TASKS / 5 + CHAOS_TASKS * CHAOS_GAP),
        what="all tasks to succeed",
    )
    reclaimer.stopped.set()
    reclaimer.join(30)
    assert reclaimer.error is None, reclaimer.error
    for w in workers:
        w.send_signal(signal.SIGTERM)
        w.wait(15)
    stale = sum(1 for w in SPAWNED for x in w.lines if x.startswith("stale"))
    try:
        figures = _history(database, tenant, submitted, fence, limit_of).check()
    except AssertionError as exc:
        key = str(exc).split(":")[0]  # the checker names the key first
        rows = database.query(
            "SELECT a.concurrency_token, a.concurrency_slot, a.created_at, a.finished_at, "
            "a.state, a.session_id FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "WHERE t.namespace_id = %s AND t.concurrency_key = %s ORDER BY a.created_at",
            (tenant.namespace_id, key.split(" slot")[0]),
        )
        print("\n".join(str(r) for r in rows[:80]))
        raise
    seen = client_history(SPAWNED, limit_of).check()  # what the workers saw, on their clocks
    print(
        f"\nmixed: server={figures} client_grants={seen['grants']} "
        f"client_overlaps={seen['overlaps']} worker_kills={kills} "
        f"db_connection_kills={db_kills[0]} key_rows_reclaimed={reclaimer.reclaimed} "
        f"stale_writes_rejected={stale}"
    )
    assert reclaimer.reclaimed > 0
    assert figures["lost"] == 0 and figures["writes"] >= CHAOS_TASKS
    assert seen["grants"] >= CHAOS_TASKS and seen["overlaps"] == 0
    if first >= 3 * CHAOS_KEYS:
        # Each key began with a backlog (the long run): the pool keys had several holders at
        # once. The short run submits too slowly for any key to have two.
        assert figures["most_holders"] > 1


def test_kill_9_mariadbd_loses_no_accepted_task_and_no_token(tmp_path):
    srv = localdb.PrivateServer(tmp_path / "db", localdb.ensure_binaries())
    dsn = srv.start()
    try:
        schema.apply(dsn)
        database = Database(dsn)
        eng = Engine(database, make_tenant(database, tmp_path))
        accepted = [eng.submit(f"crash/{i % 4}") for i in range(20)]
        session, _ = eng.hello(capacity=4)
        acknowledged: dict[str, int] = {}
        for _ in range(6):
            for a in eng.claim(session, 4):
                eng.start(session, a["attempt_id"])
                eng.result(session, a["attempt_id"])
                acknowledged[a["concurrency_key"]] = a["concurrency_token"]
        pid = int((tmp_path / "db" / "mysqld.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not srv._alive(pid), what="mariadbd to die")
        database.close()
        dsn = srv.start()  # same data directory, crash recovery
        database = Database(dsn)
        eng.db = database
        found = {r["public_id"] for r in database.query("SELECT public_id FROM tasks")}
        assert set(accepted) <= found
        for key, token in acknowledged.items():
            assert eng.resource(key)["token"] >= token
        session, _ = eng.hello(capacity=4)
        for a in eng.claim(session, 4):
            assert a["concurrency_token"] > acknowledged.get(a["concurrency_key"], 0)
        print(
            f"\nkill -9 mariadbd: accepted={len(accepted)} lost=0 keys_checked={len(acknowledged)}"
        )
        database.close()
    finally:
        srv.stop()


def test_gunicorn_reload_under_load_loses_nothing(orbit_process, tenant):
    client = Client(orbit_process.url, tenant.token, retries=8)
    queue = client.create_queue("reload").queue_id
    accepted, errors = [], []

    def produce(n):
        c = Client(orbit_process.url, tenant.token, retries=8)
        for i in range(n, 120, 4):
            try:
                accepted.append(submit(c, queue, "", idem=f"reload-{i}"))
            except Exception as exc:  # noqa: BLE001 - counted and asserted below
                errors.append(exc)
        c.close()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    orbit_process.send_signal(signal.SIGHUP)  # gunicorn replaces every worker process
    for t in threads:
        t.join()
    assert not errors
    assert len(set(accepted)) == 120
    tasks = client.list_tasks(queue_id=queue, limit=200).tasks
    assert len(tasks) == 120
    client.close()
    print(f"\ngunicorn reload: submitted=120 accepted={len(set(accepted))} lost=0")


def test_full_server_restart_under_load_loses_nothing(orbit_dsn, tenant, tmp_path):
    """Stop `orbit` entirely (SIGTERM) and start it again while producers keep submitting."""
    port = localdb.free_port()
    env = dict(
        os.environ,
        ORBIT_MYSQL_DSN=orbit_dsn,
        ORBIT_HTTP_ADDR=f"127.0.0.1:{port}",
        ORBIT_HTTP_WORKERS="2",
    )
    url = f"http://127.0.0.1:{port}"
    orbit = str(Path(sys.executable).with_name("orbit"))

    def start():
        proc = subprocess.Popen(
            [orbit], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(lambda: _ready(url), what="orbit to start")
        return proc

    server = start()
    client = Client(url, tenant.token, retries=10)
    queue = client.create_queue("restart").queue_id
    accepted, failures = [], []

    def produce(n):
        c = Client(url, tenant.token, retries=10)
        for i in range(n, 200, 4):
            try:
                accepted.append(submit(c, queue, "", idem=f"restart-{i}"))
            except Exception as exc:  # noqa: BLE001 - counted and asserted below
                failures.append(exc)
            time.sleep(0.01)
        c.close()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    server.terminate()
    server.wait(30)
    server = start()
    try:
        for t in threads:
            t.join()
        assert not failures
        assert len(set(accepted)) == 200
        assert len(client.list_tasks(queue_id=queue, limit=200).tasks) == 200
    finally:
        client.close()
        server.terminate()
        server.wait(30)
    print(f"\nserver restart: submitted=200 accepted={len(set(accepted))} lost=0")


def _ready(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url + "/readyz", timeout=1).close()
        return True
    except OSError:
        return False
