"""Wakeups (W7): a claim waiting in a long poll takes a task when its submission commits, not at
its next probe; the server's processes tell each other; a wakeup that is lost leaves the task
to the next probe, never unstarted.

The probes are set 60 s apart here, longer than each poll waits, so a poll that is not woken
probes once, at the end of its wait; one that is woken claims without probing at all."""

from __future__ import annotations

import dataclasses
import multiprocessing
import subprocess
import sys
import threading
import time

import pytest
from falcon import testing

from orbit_shell.engine import longpoll
from orbit_shell.engine.db import Database
from orbit_shell.server import wakeups
from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from tests.helpers import Session, limited_credential, submit, task_body


def _waiting_claim(session: Session, wait_ms: int) -> tuple[threading.Thread, list]:
    got: list = []
    thread = threading.Thread(target=lambda: got.append(session.claim(1, wait_ms=wait_ms)))
    thread.start()
    return thread, got


def _until_waiting(app_wakeups: wakeups.Wakeups, queue: str) -> None:
    """Until a poll listens on ``queue`` (the claim made its first fetch and found nothing);
    a poll that never listens there fails the test instead of hanging it."""
    deadline = time.monotonic() + 10
    while not app_wakeups._waiting.get(queue):
        assert time.monotonic() < deadline, f"no poll listens on {queue}"
        time.sleep(0.01)


@pytest.fixture
def woken(orbit_dsn, database) -> wakeups.Wakeups:
    return wakeups.Wakeups()


class _Counted(Database):
    """The app's pool, counting the probes (``session_ready``) its polls make."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.probes = 0

    def call(self, procedure, *args):
        self.probes += procedure == "session_ready"
        return super().call(procedure, *args)


@pytest.fixture
def counted(orbit_dsn):
    pool = _Counted(orbit_dsn)
    yield pool
    pool.close()


@pytest.fixture
def client(orbit_dsn, counted, woken) -> testing.TestClient:
    """An app of its own, whose wakeups and probes the tests see."""
    return testing.TestClient(create_app(Config(dsn=orbit_dsn), database=counted, wakeups=woken))


@pytest.fixture
def slow_probes(monkeypatch):
    monkeypatch.setattr(longpoll, "PROBE_PAUSE", 60.0)
    monkeypatch.setattr(longpoll, "PROBE_PAUSE_MAX", 60.0)


@pytest.mark.usefixtures("slow_probes")
@pytest.mark.parametrize("how", ["single", "batch"])
def test_w7_a_submission_wakes_the_claim_waiting_on_its_queue(client, tenant, woken, counted, how):
    session = Session(client, tenant, capacity=1)
    thread, got = _waiting_claim(session, 10_000)
    _until_waiting(woken, tenant.queue_id)
    if how == "single":
        task = submit(client, tenant).json["data"]["task_id"]
    else:
        result = client.simulate_post(
            "/v1/tasks/batch",
            headers=tenant.headers,
            json={"tasks": [{**task_body(tenant.queue_id), "idempotency_key": "wake-batch"}]},
        )
        task = result.json["data"]["results"][0]["data"]["task_id"]
    thread.join(30)
    assert [a["task"]["task_id"] for a in got[0]] == [task]
    assert counted.probes == 0  # claimed when woken, not after a probe


@pytest.mark.usefixtures("slow_probes")
@pytest.mark.parametrize("credential", ["every queue", "some queues"])
def test_w7_a_poll_listens_on_each_queue_of_its_session(
    client, tenant, woken, counted, database, credential
):
    """A poll listens on each queue of its session, whether its credential covers every queue
    (the claim's routine authenticates it) or only some (the shell checks it first): a
    submission to any of them wakes it."""
    queues = [tenant.queue_id]
    if credential == "every queue":
        made = client.simulate_post(
            "/v1/queues", headers=tenant.headers, json={"name": "wake-second"}
        )
        assert made.status_code == 201, made.text
        queues.append(made.json["data"]["queue_id"])
        worker = tenant
    else:  # limited to the tenant's first queue (helpers.limited_credential)
        headers = limited_credential(database, tenant, "workers:connect,workers:consume")
        worker = dataclasses.replace(tenant, token=headers["Authorization"].split()[1])
    session = Session(client, worker, queue_ids=queues, capacity=1)
    thread, got = _waiting_claim(session, 10_000)
    for queue in queues:
        _until_waiting(woken, queue)
    task = submit(client, tenant, queue_id=queues[-1]).json["data"]["task_id"]
    thread.join(30)
    assert [a["task"]["task_id"] for a in got[0]] == [task]
    assert counted.probes == 0  # claimed when woken, not after a probe


@pytest.mark.usefixtures("slow_probes")
def test_w7_a_replay_wakes_nobody(client, tenant, woken):
    submit(client, tenant, "wake-replay")
    session = Session(client, tenant, capacity=1)
    assert len(session.claim(1)) == 1  # the task is taken; the queue is empty
    thread, got = _waiting_claim(session, 1_000)
    _until_waiting(woken, tenant.queue_id)
    submit(client, tenant, "wake-replay", 200)
    assert woken._waiting[tenant.queue_id][0].event.is_set() is False
    thread.join(30)
    assert got == [[]]


def test_w7_a_lost_wakeup_leaves_the_task_to_the_next_probe(client, tenant, woken, monkeypatch):
    notified: list = []
    monkeypatch.setattr(woken, "notify", notified.append)  # every wakeup lost
    session = Session(client, tenant, capacity=1)
    thread, got = _waiting_claim(session, 20_000)
    _until_waiting(woken, tenant.queue_id)
    task = submit(client, tenant).json["data"]["task_id"]
    thread.join(30)
    assert notified == [{tenant.queue_id: 1}]
    assert [a["task"]["task_id"] for a in got[0]] == [task]


def _listen(directory: str, queue: str, ready, answer) -> None:
    mine = wakeups.Wakeups(directory)
    with mine.listen([queue]) as waiter:
        ready.set()
        answer.put(waiter.wait(20.0))


def test_w7_a_wakeup_crosses_to_the_servers_other_processes(tmp_path):
    """Two processes, as a server has: the one that commits has no poll waiting on the
    queue, so it sends the wakeup to the other, whose poll it wakes."""
    context = multiprocessing.get_context("spawn")
    ready, answer = context.Event(), context.Queue()
    other = context.Process(target=_listen, args=(str(tmp_path), "q1", ready, answer))
    other.start()
    try:
        assert ready.wait(10)
        mine = wakeups.Wakeups(str(tmp_path))
        mine.notify({"q1": 1})
        assert answer.get(timeout=20) is True
    finally:
        other.join(10)
        other.kill()


def test_w7_a_process_wakes_its_own_polls_first_and_sends_only_the_rest(tmp_path):
    mine = wakeups.Wakeups(str(tmp_path))
    sent: list = []
    mine._send = sent.append
    with mine.listen(["q1"]) as first, mine.listen(["q1", "q2"]) as second:
        mine.notify({"q1": 1})
        assert first.event.is_set() and not second.event.is_set()
        mine.notify({"q1": 3, "q2": 1})
        assert second.event.is_set()
    assert sent == [{"q1": 2, "q2": 1}]  # the first notice woke a poll here and sent nothing


FLOOD = """
from gevent import monkey; monkey.patch_all()
import socket, sys, gevent
from orbit_shell.server.wakeups import Wakeups
directory = sys.argv[1]
deaf = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # a sibling that never reads
deaf.bind(directory + "/1.sock")
mine = Wakeups(directory)
def notify():
    for _ in range(500):
        mine.notify({"q": 1})
gevent.joinall([gevent.spawn(notify) for _ in range(8)], raise_error=True)
print("sent")
"""


def test_w7_a_sibling_that_does_not_read_never_holds_up_or_fails_a_submission(tmp_path):
    """Under gevent, as the server runs: 4,000 notices from eight greenlets at once to a
    sibling whose queue fills. A send that would wait is dropped; none raises."""
    done = subprocess.run(
        [sys.executable, "-c", FLOOD, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "sent", done.stderr[-2000:]


def _listen_then_idle(directory: str, queue: str, listening, stop_listening, idle, done) -> None:
    mine = wakeups.Wakeups(directory)
    with mine.listen([queue]):
        listening.set()
        stop_listening.wait(20)
    idle.set()
    done.wait(20)  # bound and alive, with no poll waiting


class _Sent:
    """A socket stand-in that records where each datagram went."""

    def __init__(self) -> None:
        self.to: list[str] = []

    def sendto(self, data: bytes, path: str) -> None:
        self.to.append(path)


def test_w7_a_sibling_with_no_poll_waiting_is_sent_nothing(tmp_path):
    """The board: a submission sends to a sibling only while a poll waits there, so where
    nothing waits it costs no send and the sibling nothing to read."""
    context = multiprocessing.get_context("spawn")
    listening, stop_listening, idle, done = (context.Event() for _ in range(4))
    other = context.Process(
        target=_listen_then_idle,
        args=(str(tmp_path), "q1", listening, stop_listening, idle, done),
    )
    other.start()
    try:
        assert listening.wait(10)
        mine = wakeups.Wakeups(str(tmp_path))
        mine._bind()
        mine._out.close()
        mine._out = sent = _Sent()
        sibling = str(tmp_path / f"{other.pid}.sock")
        mine.notify({"q1": 1})
        assert sent.to == [sibling]
        stop_listening.set()
        assert idle.wait(10)
        mine.notify({"q1": 1})
        assert sent.to == [sibling]  # nothing more: no poll waits there now
    finally:
        done.set()
        other.join(10)
        other.kill()
