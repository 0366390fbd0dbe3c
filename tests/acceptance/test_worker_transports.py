"""One worker suite, run over both transports (W9): HTTP through gunicorn, and the direct MySQL
transport with the least-privilege account from `orbit-admin worker-account`."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import defaultdict
from urllib.parse import urlparse

import pymysql
import pytest

from orbit_shell.engine import db, schema
from orbit_shell.engine.db import Database
from orbit_shell.engine.schema import SchemaMismatch, routine_name
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import (
    ApiError,
    IdempotencyConflictError,
    InvalidArgumentError,
    NotFoundError,
    PayloadTooLargeError,
    SubmitTaskRequest,
    UnavailableError,
)
from orbit_shell.sdk.transport import WORKER_PROTOCOL, HttpTransport, MysqlTransport
from orbit_shell.sdk.worker import Retry, UnknownOutcome, Worker
from tests.acceptance.proxy import FailingProxy
from tests.conftest import make_tenant
from tests.helpers import account_dsn, answer_protocol


@pytest.fixture
def worker_dsn(orbit_dsn, server, tenant, tmp_path):
    """A direct-worker account made by orbit-admin for the test's tenant; its DSN reaches the
    server over TCP."""
    name = "orbit_worker_" + secrets.token_hex(3)
    return account_dsn(orbit_dsn, server, name, tmp_path / "worker.json", tenant)


@pytest.fixture(params=["http", "mysql"])
def make_worker(request, orbit_server, tenant, worker_dsn):
    workers = []

    def make(queue_ids, **kwargs):
        if request.param == "http":
            worker = Worker(queue_ids, url=orbit_server, token=tenant.token, wait_ms=300, **kwargs)
        else:
            transport = MysqlTransport(worker_dsn, tenant.application, "test", tenant.namespace)
            worker = Worker(queue_ids, transport=transport, wait_ms=300, **kwargs)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.drain(timeout=10)


@pytest.fixture
def api(orbit_server, tenant):
    client = Client(orbit_server, tenant.token)
    yield client
    client.close()


def _submit(api, queue_id, handler="job", key=None, **kw):
    return api.submit_task(
        secrets.token_hex(8),
        SubmitTaskRequest(
            queue_id=queue_id,
            handler=handler,
            handler_version="v1",
            payload_version="v1",
            payload={"n": 1},
            concurrency_key=key,
            **kw,
        ),
    ).task.task_id


def _wait(api, task_ids, states=("SUCCEEDED", "FAILED", "NEEDS_REVIEW"), timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        found = {t: api.get_task(t).state for t in task_ids}
        if all(s in states for s in found.values()) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_outcomes_map_from_handlers(make_worker, api, tenant):
    q = api.create_queue("outcomes", retry_backoff_seconds=0, retry_backoff_max_seconds=0).queue_id
    calls = defaultdict(int)
    worker = make_worker([q], capacity=4)

    @worker.handler("ok")
    def ok(event):
        return {
            "echo": event.payload,
            "key": event.task.concurrency_key,
            "token": event.concurrency_token,
        }

    @worker.handler("flaky")
    def flaky(event):
        calls[event.task.task_id] += 1
        if event.attempt_number == 1:
            raise Retry("try again")
        return "second time"

    @worker.handler("unknown")
    def unknown(event):
        raise UnknownOutcome("timed out talking to the resource")

    @worker.handler("broken")
    def broken(event):
        raise ValueError("bad input")

    @worker.handler("deep")
    def deep(event):  # more than a report may carry (L2): failed, not a refused batch
        value: object = 1
        for _ in range(40):
            value = [value]
        return value

    worker.start()
    ids = {
        name: _submit(api, q, name, key="out/k" if name == "ok" else None)
        for name in ("ok", "flaky", "unknown", "broken", "nobody", "deep")
    }
    states = _wait(api, ids.values())
    assert states == {
        ids["ok"]: "SUCCEEDED",
        ids["flaky"]: "SUCCEEDED",
        ids["unknown"]: "NEEDS_REVIEW",
        ids["broken"]: "FAILED",
        ids["nobody"]: "FAILED",
        ids["deep"]: "FAILED",
    }
    assert "nests deeper" in api.get_task(ids["deep"]).error["message"]
    ok_task = api.get_task(ids["ok"])
    assert ok_task.result == {"echo": {"n": 1}, "key": "out/k", "token": 1}
    assert calls[ids["flaky"]] == 2
    assert api.get_task(ids["broken"]).error["type"] == "ValueError"
    assert worker.drain(timeout=10) is True


def test_one_key_never_runs_twice_at_once_and_tokens_grow(make_worker, api):
    queues = [api.create_queue(f"keyed-{i}").queue_id for i in range(2)]
    running, overlaps, tokens = defaultdict(int), [], []
    lock = threading.Lock()

    def handler(event):
        with lock:
            running[event.task.concurrency_key] += 1
            if running[event.task.concurrency_key] > 1:
                overlaps.append(event.attempt_id)
            tokens.append(event.concurrency_token)
        time.sleep(0.02)
        with lock:
            running[event.task.concurrency_key] -= 1

    for _ in range(2):
        worker = make_worker(queues, capacity=4)
        worker.register("job", "v1", handler)
        worker.start()
    ids = [_submit(api, queues[i % 2], key="shared/key") for i in range(10)]
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    assert overlaps == []
    assert tokens == sorted(tokens) and len(set(tokens)) == 10


def test_batched_submissions_and_batched_worker_calls(make_worker, api):
    """Batch submit through the SDK client; the worker starts and reports in batches; each item
    keeps its own answer, over both transports."""
    q = api.create_queue("batched").queue_id
    request = lambda n, key=None: SubmitTaskRequest(  # noqa: E731 - a tiny local factory
        queue_id=q,
        handler="job",
        handler_version="v1",
        payload_version="v1",
        payload={"n": n},
        concurrency_key=key,
    )
    prefix = secrets.token_hex(4)
    items = [(f"{prefix}-{n}", request(n, f"batched/{n % 3}")) for n in range(30)]
    receipts = api.submit_tasks(items)
    assert all(r.created for r in receipts)
    again = api.submit_tasks([items[0], (items[1][0], request(99))])
    assert again[0].task_id == receipts[0].task_id and again[0].created is False
    assert isinstance(again[1], IdempotencyConflictError)

    worker = make_worker([q], capacity=8)
    worker.register("job", "v1", lambda event: {"n": event.payload["n"]})
    worker.start()
    ids = [r.task_id for r in receipts]
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    assert api.get_task(ids[7]).raw["result"] == {"n": 7}

    # The transport's batch calls answer per attempt, in order, over HTTP and MySQL alike.
    assert worker.drain(timeout=10)  # so the next task can only go to the session below
    transport = worker.transport
    hello = transport.hello("batch-" + secrets.token_hex(3), [q], 4, True)
    [done] = api.submit_tasks([(f"{prefix}-last", request(100))])
    [assignment] = transport.claim(hello.session_id, 1, 2000)
    attempt = assignment["attempt_id"]
    started = transport.start_many(hello.session_id, [attempt, "e" * 32])
    # The brief answer (the worker runs what started): the same over both transports.
    assert started[0] == {"attempt_id": attempt, "state": "RUNNING"}
    assert isinstance(started[1], NotFoundError)
    result = {"attempt_id": attempt, "outcome": "succeeded", "retryable": False}
    reported = transport.result_many(
        hello.session_id, [{**result, "result": None, "error": None}] * 2
    )
    assert [r["duplicate"] for r in reported] == [False, True]
    assert api.get_task(done.task_id).state == "SUCCEEDED"
    # A report that claims: answered per item, then what the claim granted.
    [second] = api.submit_tasks([(f"{prefix}-after", request(101))])
    reported, granted = transport.report_and_claim(
        hello.session_id,
        [{**result, "result": None, "error": None}, {**result, "attempt_id": "e" * 32}],
        4,
    )
    assert reported[0]["duplicate"] is True and isinstance(reported[1], NotFoundError)
    assert [a["task"]["task_id"] for a in granted] == [second.task_id]
    transport.goodbye(hello.session_id)


class Counting:
    """A real transport whose calls are counted (what a worker asked, not what it got), with
    the most claims it had in flight at once (a claim, or a report asking for some)."""

    def __init__(self, transport):
        self.transport, self.calls, self.granted = transport, defaultdict(int), defaultdict(int)
        self.claiming = self.most_claiming = 0
        self.lock = threading.Lock()

    def __getattr__(self, name):
        call = getattr(self.transport, name)

        def counted(*args, **kwargs):
            claims = name == "claim" or (name == "report_and_claim" and args[2] > 0)
            with self.lock:
                self.calls[name] += 1
                self.claiming += claims
                self.most_claiming = max(self.most_claiming, self.claiming)
            try:
                answer = call(*args, **kwargs)
            finally:
                with self.lock:
                    self.claiming -= claims
            if name == "claim":
                self.granted[name] += len(answer)
            elif name == "report_and_claim":
                self.granted[name] += len(answer[1])
            return answer

        return counted


@pytest.mark.parametrize("claim_with_report", [True, False])
def test_reports_refill_the_slots_they_free_without_prefetch(make_worker, api, claim_with_report):
    """Without prefetch a slot frees only once its result is recorded; a report that claims
    refills it in the same request, so after the first claim the claims come from reports."""
    q = api.create_queue("refill").queue_id
    prefix = secrets.token_hex(4)
    receipts = api.submit_tasks(
        [
            (
                f"{prefix}-{n}",
                SubmitTaskRequest(
                    queue_id=q,
                    handler="job",
                    handler_version="v1",
                    payload_version="v1",
                    payload=n,
                ),
            )
            for n in range(40)
        ]
    )
    worker = make_worker([q], capacity=10, claim_with_report=claim_with_report)
    worker.transport = counting = Counting(worker.transport)
    worker.register("job", "v1", lambda event: None)
    worker.start()
    assert set(_wait(api, [r.task_id for r in receipts]).values()) == {"SUCCEEDED"}
    assert counting.granted["claim"] + counting.granted["report_and_claim"] == 40
    if claim_with_report:
        assert counting.granted["report_and_claim"] >= 20, dict(counting.granted)
    else:
        assert counting.calls["report_and_claim"] == 0


def test_a_busy_worker_has_one_claim_in_flight(make_worker, api):
    """Without prefetch a worker's reports claim for it while its handlers run, though most
    of its slots are free, and its claim loop waits for them: never two claims in flight at
    once, so the work that keeps arriving is not split into smaller claims."""
    q = api.create_queue("one-claim").queue_id
    worker = make_worker([q], capacity=100)
    worker.transport = counting = Counting(worker.transport)
    worker.register("job", "v1", lambda event: time.sleep(0.002))
    worker.start()
    ids = []
    for _ in range(6):  # work that keeps arriving while the worker runs
        ids += [_submit(api, q) for _ in range(10)]
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    assert counting.most_claiming == 1, dict(counting.calls)
    assert counting.granted["report_and_claim"] > 0, dict(counting.granted)
    assert counting.granted["claim"] + counting.granted["report_and_claim"] == 60


def test_a_long_handler_does_not_hold_the_free_slots_idle(make_worker, api):
    """The claim loop leaves claiming to the reports only briefly (CLAIM_DEFER): with one
    handler running for seconds and nothing to report, a task submitted meanwhile is claimed
    by the long poll and runs beside it, not after it."""
    q = api.create_queue("long-handler").queue_id
    started, release = {}, threading.Event()

    def job(event):
        started[event.task.task_id] = time.monotonic()
        if event.task.payload == {"n": "long"}:
            release.wait(10)

    worker = make_worker([q], capacity=4)
    worker.register("job", "v1", job)
    worker.start()
    long_id = api.submit_task(
        secrets.token_hex(8),
        SubmitTaskRequest(queue_id=q, handler="job", handler_version="v1",
                          payload_version="v1", payload={"n": "long"}),
    ).task.task_id  # fmt: skip
    deadline = time.monotonic() + 10
    while long_id not in started and time.monotonic() < deadline:
        time.sleep(0.01)
    short_id = _submit(api, q)
    while short_id not in started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert short_id in started, "the second task waited for the long one"
    release.set()
    assert set(_wait(api, [long_id, short_id]).values()) == {"SUCCEEDED"}


@pytest.mark.parametrize("keyed", [True, False])
def test_a_report_that_frees_a_key_claims_the_next_task_with_slots_free(
    make_worker, api, keyed, monkeypatch
):
    """Six tasks of one key run one after another: each result releases the key and promotes
    the next (K6), and with slots free its report still claims, in the same transaction, one
    task per key it released, so the next task comes with the report instead of at the long
    poll's next probe. Six unkeyed tasks all come with the first claim; their report claims
    for the worker (one claim in flight), and finds nothing more. The claim loop leaves the
    claiming to reports for 1 s after work arrives here, not 20 ms: on a loaded machine the
    report of six no-op tasks once came later than 20 ms, after the long poll had begun, and
    went alone (the long-handler test covers what the short wait is for)."""
    monkeypatch.setattr("orbit_shell.sdk.worker.CLAIM_DEFER", 1.0)
    q = api.create_queue("hot-key").queue_id
    key = f"hot/{secrets.token_hex(4)}" if keyed else None
    ids = [_submit(api, q, key=key) for _ in range(6)]
    worker = make_worker([q], capacity=10)
    worker.transport = counting = Counting(worker.transport)
    worker.register("job", "v1", lambda event: None)
    worker.start()
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    if keyed:
        # The key is busy from the first claim on, so only a report may take its next task.
        assert counting.granted["claim"] == 1, dict(counting.granted)
        assert counting.granted["report_and_claim"] == 5, dict(counting.granted)
    else:
        assert counting.granted["claim"] + counting.granted["report_and_claim"] == 6
        assert counting.calls["report_and_claim"] >= 1, dict(counting.calls)
        assert counting.calls["result_many"] == 0, dict(counting.calls)


@pytest.mark.parametrize(
    "prefetch, start_with_claim",
    [(0, True), (0, False), (2, True)],
    ids=["one", "apart", "prefetch"],
)
def test_a_worker_without_prefetch_starts_what_it_claims_in_the_claim(
    make_worker, api, database, prefetch, start_with_claim
):
    """W3/W4: without prefetch every attempt a claim returns has a free handler, so the claim
    (or the report that claims) starts it and no start request is made; with prefetch, or
    asked not to, the worker starts in requests of its own. Either way each handler runs on
    an attempt that is RUNNING, and a hot key's tasks run one after another."""
    q = api.create_queue("claim-start").queue_id
    key = f"hot/{secrets.token_hex(4)}"
    ids = [_submit(api, q, key=key) for _ in range(5)] + [_submit(api, q) for _ in range(5)]
    seen = []
    worker = make_worker([q], capacity=4, prefetch=prefetch, start_with_claim=start_with_claim)
    worker.transport = counting = Counting(worker.transport)

    @worker.handler("job")
    def job(event):
        [row] = database.query(
            "SELECT state FROM attempts WHERE public_id = %s", (event.attempt_id,)
        )
        seen.append(row["state"])

    worker.start()
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    assert seen == ["RUNNING"] * 10
    assert counting.granted["claim"] + counting.granted["report_and_claim"] == 10
    if prefetch == 0 and start_with_claim:
        assert counting.calls["start_many"] == 0, dict(counting.calls)
        assert counting.granted["report_and_claim"] >= 4  # the key's tasks after its first
    else:
        assert counting.calls["start_many"] >= 1, dict(counting.calls)


@pytest.mark.parametrize("lose", ["claim", "report_and_claim"])
def test_a_lost_answer_of_a_claim_that_started_is_recovered_and_run(make_worker, api, lose):
    """L3/W3: a claim (or a report that claims) that started what it granted commits, and its
    answer never arrives. The worker says hello again, which answers every attempt its session
    holds, and runs the ones it did not know; left alone they would hold the key until their
    30 s lease ran out and then end UNKNOWN."""
    q = api.create_queue("lost-answer", lease_seconds=30).queue_id
    key = f"hot/{secrets.token_hex(4)}"
    ids = [_submit(api, q, key=key) for _ in range(3)]
    worker = make_worker([q], capacity=2)
    real, lost = getattr(worker.transport, lose), []

    def losing(*args, **kwargs):
        answer = real(*args, **kwargs)
        granted = answer if lose == "claim" else answer[1]
        if granted and not lost:
            lost.extend(a["attempt_id"] for a in granted)
            raise UnavailableError("UNAVAILABLE", 0, "injected: the answer was lost")
        return answer

    setattr(worker.transport, lose, losing)
    runs = []
    worker.register("job", "v1", lambda event: runs.append(event.attempt_id))
    worker.start()
    assert _wait(api, ids, timeout=20) == dict.fromkeys(ids, "SUCCEEDED")
    assert len(lost) == 1 and lost[0] in runs
    assert len(runs) == 3  # each task ran once: the recovered attempt was not claimed again


@pytest.mark.parametrize("committed", [False, True], ids=["rolled_back", "committed"])
def test_a_report_that_failed_in_the_server_is_resent_as_results_alone(make_worker, api, committed):
    """A report-and-claim answered with a 5xx (INTERNAL) failed in the server, perhaps in its
    claim half, perhaps after its commit. Its results are sent again alone (they are
    idempotent) and what a committed claim started is recovered by hello; taken as refused,
    the batch's results were dropped and its tasks ended at their lease's end (30 s here)."""
    q = api.create_queue("report-5xx", lease_seconds=30).queue_id
    key = f"hot/{secrets.token_hex(4)}"
    ids = [_submit(api, q, key=key) for _ in range(3)]
    worker = make_worker([q], capacity=2)
    real, failed = worker.transport.report_and_claim, []

    def failing(session_id, items, *args, **kwargs):
        if items and not failed:
            failed.append([i["attempt_id"] for i in items])
            if committed:
                real(session_id, items, *args, **kwargs)
            raise ApiError("INTERNAL", 500, "injected: the report failed in the server")
        return real(session_id, items, *args, **kwargs)

    worker.transport.report_and_claim = failing
    runs = []
    worker.register("job", "v1", lambda event: runs.append(event.task.task_id))
    worker.start()
    assert _wait(api, ids, timeout=20) == dict.fromkeys(ids, "SUCCEEDED")
    assert len(failed) == 1
    assert sorted(runs) == sorted(ids)  # each ran once: nothing was claimed twice


@pytest.mark.parametrize(
    "path, how",
    [
        ("/report-and-claim", "before"),  # 502: never reached Orbit
        ("/report-and-claim", "after"),  # 504: committed, its answer dropped
        ("/workers/hello", "before"),
        ("/claim", "after"),
    ],
)
def test_a_proxys_gateway_error_page_is_retried_like_a_lost_answer(
    orbit_server, api, tenant, path, how
):
    """Behind nginx or a load balancer, a restarting or slow Orbit shows as a 502 or 504 HTML
    page. The worker takes it for what it is, Orbit unavailable, and goes on as after a lost
    answer: results sent again (they are idempotent), a claim that may have committed
    recovered by hello, hello tried again. Read as an INTERNAL error, the results were dropped
    (the tasks ended UNKNOWN at their lease's end) and a failed hello stopped the worker."""
    q = api.create_queue(f"proxied-{how}", lease_seconds=30).queue_id
    ids = [_submit(api, q) for _ in range(4)]
    once: list[str] = []

    def fail(method: str, at: str) -> str | None:
        if method == "POST" and at.endswith(path) and not once:
            once.append(at)
            return how
        return None

    runs: list[str] = []
    with FailingProxy(orbit_server, fail) as proxy:
        worker = Worker([q], url=proxy.url, token=tenant.token, capacity=1, wait_ms=300)
        worker.register("job", "v1", lambda event: runs.append(event.task.task_id))
        worker.start()
        try:
            states = _wait(api, ids, timeout=20)
        finally:
            worker.drain(timeout=10)
    assert len(proxy.failed) == 1, proxy.failed
    assert states == dict.fromkeys(ids, "SUCCEEDED")
    assert sorted(runs) == sorted(ids)  # each ran once


def test_l2_large_results_never_cost_another_task_its_report(make_worker, api):
    """L2: a request body is at most 1 MiB. A result too large for any report fails its own
    task, named; results that fit one by one but not together go in several reports. Sent as
    they came, one report over the bound was refused whole (413), and with it every outcome
    it carried: those tasks ended UNKNOWN at their lease's end."""
    q = api.create_queue("large-results", lease_seconds=30).queue_id
    worker = make_worker([q], capacity=8, report_linger=0.5)
    worker.register("too-big", "v1", lambda event: "x" * (1024 * 1024))
    worker.register("large", "v1", lambda event: "y" * (300 * 1024))
    worker.register("small", "v1", lambda event: {"ok": True})
    worker.register("loud", "v1", lambda event: (_ for _ in ()).throw(RuntimeError("z" * 200_000)))
    handlers = ["too-big", "loud", *["large"] * 4, *["small"] * 2]
    ids = {_submit(api, q, handler=h): h for h in handlers}
    worker.start()
    assert _wait(api, list(ids), timeout=20) == {
        t: "FAILED" if h in ("too-big", "loud") else "SUCCEEDED" for t, h in ids.items()
    }
    for task_id, handler in ids.items():
        task = api.get_task(task_id)
        if handler == "too-big":
            assert task.error["type"] == "ValueError"
            assert "a report carries at most" in task.error["message"], task.error
        elif handler == "loud":  # the message kept, cut to what a report carries
            assert task.error["type"] == "RuntimeError"
            assert task.error["message"].startswith("zzz") and len(task.error["message"]) < 20_000
        elif handler == "large":
            assert task.result == "y" * (300 * 1024)


def test_a_worker_with_prefetch_and_a_free_slot_reports_without_claiming(make_worker, api):
    """With prefetch a report claims only when every slot is held: with room left the claim
    loop claims on its own, and a second claimer would split what arrives into more, smaller
    claims. (Without prefetch the reports claim instead: the test above.)"""
    q = api.create_queue("room").queue_id
    worker = make_worker([q], capacity=10, prefetch=2)
    worker.transport = counting = Counting(worker.transport)
    worker.register("job", "v1", lambda event: None)
    worker.start()
    ids = [_submit(api, q) for _ in range(5)]  # never more than 5 of 10 slots held
    assert set(_wait(api, ids).values()) == {"SUCCEEDED"}
    assert counting.calls["report_and_claim"] == 0
    assert counting.calls["result_many"] >= 1


def test_a_report_holding_everything_in_flight_is_sent_without_lingering(make_worker, api):
    """With a linger far longer than the wait below, the tasks still finish: each report holds
    every attempt in flight, so nothing could join it and it goes at once."""
    q = api.create_queue("linger").queue_id
    worker = make_worker([q], capacity=2, report_linger=600)
    worker.register("job", "v1", lambda event: event.payload["n"])
    worker.start()
    ids = [_submit(api, q) for _ in range(5)]
    assert set(_wait(api, ids, timeout=30).values()) == {"SUCCEEDED"}


def test_unkeyed_sessions_never_receive_keyed_tasks(make_worker, api):
    q = api.create_queue("legacy").queue_id
    seen = []
    worker = make_worker([q], capacity=2, concurrency_keys=False)
    worker.register("job", "v1", lambda e: seen.append(e.task.concurrency_key))
    # The keyed task goes first: a claim takes a queue's tasks in id order at one priority,
    # so the claim that took the plain task passed the keyed one, and no wait is needed to
    # see that it was skipped (W2).
    keyed = _submit(api, q, key="legacy/k")
    plain = _submit(api, q)
    worker.start()
    assert _wait(api, [plain]) == {plain: "SUCCEEDED"}
    assert api.get_task(keyed).state == "WAITING"
    assert seen == [None]


def test_l1_a_worker_resumes_its_in_flight_attempts_a_page_at_a_time(make_worker, api, tenant):
    """Hello answers a session's in-flight attempts in pages whose payloads stay within a
    request body's bound (L1); a worker that says hello again to resume reads every page.
    A cursor that is not one of the session's attempts is refused."""
    queue = tenant.queue_id
    blob = {"blob": "x" * 300_000}  # three to a page
    for _ in range(5):
        _submit_payload(api, queue, blob)
    worker = make_worker([queue], capacity=10)
    t = worker.transport
    session = t.hello(worker.worker_id, [queue], 10, True).session_id
    claimed = t.claim(session, 10, 0) + t.claim(session, 10, 0)  # 3, then 2: the budget
    ids = [c["attempt_id"] for c in claimed]
    assert len(ids) == 5
    page = t.hello(worker.worker_id, [queue], 10, True)
    assert [a["attempt_id"] for a in page.in_flight] == ids[:3]
    assert page.in_flight_after == ids[2]
    resumed = worker._say_hello()
    assert [a["attempt_id"] for a in resumed.in_flight] == ids
    assert resumed.in_flight_after is None and resumed.session_id == session
    with pytest.raises(NotFoundError):
        t.hello(worker.worker_id, [queue], 10, True, "0" * 32)
    with pytest.raises(InvalidArgumentError):
        t.hello(worker.worker_id, [queue], 10, True, "not-an-attempt")


def test_a_report_over_the_body_bound_is_refused_by_both_transports(make_worker, api, tenant):
    """W9: the direct transport refuses what the HTTP route refuses (413 over 1 MiB), before
    the database: a report of two results of 600 KB changes nothing, and each alone is
    recorded."""
    queue = tenant.queue_id
    for _ in range(2):
        _submit(api, queue)
    worker = make_worker([queue], capacity=4)
    t = worker.transport
    session = t.hello(worker.worker_id, [queue], 4, True).session_id
    claimed = t.claim(session, 2, 0, start=True)
    ids, tasks = [a["attempt_id"] for a in claimed], [a["task"]["task_id"] for a in claimed]
    assert len(ids) == 2
    big = {"blob": "r" * 600_000}
    items = [
        {"attempt_id": i, "outcome": "succeeded", "retryable": False, "result": big, "error": None}
        for i in ids
    ]
    for report in (
        lambda: t.result_many(session, items),
        lambda: t.report_and_claim(session, items, 2),
    ):
        with pytest.raises(PayloadTooLargeError):
            report()
    assert [api.get_task(task).state for task in tasks] == ["RUNNING", "RUNNING"]
    for item in items:
        [answer] = t.result_many(session, [item])
        assert not isinstance(answer, Exception), answer
    assert [api.get_task(task).state for task in tasks] == ["SUCCEEDED", "SUCCEEDED"]


def _submit_payload(api, queue_id, payload) -> str:
    return api.submit_task(
        secrets.token_hex(8),
        SubmitTaskRequest(
            queue_id=queue_id,
            handler="job",
            handler_version="v1",
            payload_version="v1",
            payload=payload,
        ),
    ).task.task_id


def test_drain_finishes_in_flight_work_then_says_goodbye(make_worker, api):
    q = api.create_queue("drain").queue_id
    started = threading.Event()
    worker = make_worker([q], capacity=1, drain_timeout=10)

    @worker.handler("job")
    def slow(event):
        started.set()
        time.sleep(0.5)
        return "done"

    worker.start()
    task = _submit(api, q)
    assert started.wait(10)
    assert worker.drain(timeout=15) is True
    assert api.get_task(task).state == "SUCCEEDED"


def test_prefetch_holds_claimed_attempts_without_running_more_than_capacity(
    make_worker, api, database
):
    """W4 with prefetch: the session holds capacity + prefetch attempts, at most `capacity`
    handlers run, the prefetched wait LEASED (not started) until a handler is free, and a
    drain runs them before saying goodbye."""
    q = api.create_queue("prefetch").queue_id
    [row] = database.query("SELECT id FROM queues WHERE public_id = %s", (q,))
    gate, lock = threading.Event(), threading.Lock()
    running, most = [0], [0]
    worker = make_worker([q], capacity=2, prefetch=3, drain_timeout=20)

    @worker.handler("job")
    def held(event):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        gate.wait(20)
        with lock:
            running[0] -= 1

    ids = [_submit(api, q) for _ in range(7)]
    worker.start()

    def held_states() -> dict[str, int]:
        rows = database.query(
            "SELECT state, COUNT(*) AS n FROM attempts WHERE queue_id = %s "
            "AND state IN ('LEASED', 'RUNNING') GROUP BY state",
            (row["id"],),
        )
        return {r["state"]: r["n"] for r in rows}

    deadline = time.monotonic() + 15
    while held_states() != {"RUNNING": 2, "LEASED": 3} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held_states() == {"RUNNING": 2, "LEASED": 3}  # two run, three wait unstarted
    worker.stop()  # drain: no more claims; the prefetched three still run
    time.sleep(0.5)
    gate.set()
    assert worker.drain(timeout=30) is True
    states = [api.get_task(t).state for t in ids]
    assert sorted(states) == ["SUCCEEDED"] * 5 + ["WAITING"] * 2
    assert most[0] == 2


def test_a_start_that_fails_unexpectedly_leaves_the_attempt_to_its_lease(make_worker, api):
    """The starter survives a fault that is not an API error: the attempt it could not start
    expires (1 s lease), is claimed again and runs once."""
    q = api.create_queue("start-fault", lease_seconds=1).queue_id
    runs = []
    worker = make_worker([q], capacity=1, prefetch=1)
    worker.register("job", "v1", lambda event: runs.append(event.attempt_number))
    real, failed = worker.transport.start_many, []

    def start_many(session_id, attempt_ids):
        if not failed:
            failed.append(attempt_ids)
            raise ConnectionResetError("injected: the connection dropped mid-request")
        return real(session_id, attempt_ids)

    worker.transport.start_many = start_many
    task = _submit(api, q)
    worker.start()
    assert _wait(api, [task], timeout=30) == {task: "SUCCEEDED"}
    assert len(failed) == 1 and runs == [2]  # the first attempt expired unstarted


def test_hello_checks_are_the_same_over_both_transports(make_worker, api):
    """W9: the direct transport refuses what POST /v1/workers/hello refuses, and the SDK says
    so before it starts when capacity and prefetch add up past the session limit."""
    q = api.create_queue("hello-checks").queue_id
    transport = make_worker([q]).transport
    for capacity in (0, 1001, "4"):
        with pytest.raises(InvalidArgumentError, match="capacity"):
            transport.hello("checks-" + secrets.token_hex(3), [q], capacity, True)
    with pytest.raises(InvalidArgumentError, match="queue_ids"):
        transport.hello("checks-" + secrets.token_hex(3), [], 4, True)
    with pytest.raises(ValueError, match="at most 1000"):
        make_worker([q], capacity=100, prefetch=901)


def test_both_transports_refuse_bad_worker_calls_alike(orbit_server, tenant, worker_dsn, api):
    """W9: a call the HTTP routes refuse is refused the same way by the direct transport (it
    used to pass claim sizes, outcomes and batch shapes straight to the procedures)."""
    q = api.create_queue("same-checks").queue_id
    http = HttpTransport(Client(orbit_server, tenant.token))
    direct = MysqlTransport(worker_dsn, tenant.application, "test", tenant.namespace)
    sessions = {
        t: t.hello("same-" + secrets.token_hex(3), [q], 2, True).session_id for t in (http, direct)
    }
    a = "a" * 32
    calls = {
        "claim 0": lambda t, s: t.claim(s, 0, 0),
        "claim 101": lambda t, s: t.claim(s, 101, 0),
        "claim wait -1": lambda t, s: t.claim(s, 1, -1),
        "start bad session": lambda t, s: t.start("not-hex", a),
        "renew bad session": lambda t, s: t.renew("not-hex", a),
        "start unknown": lambda t, s: t.start(s, a),
        "result outcome": lambda t, s: t.result(s, a, "maybe", False, None, None),
        "result retryable": lambda t, s: t.result(s, a, "succeeded", "yes", None, None),
        "start none": lambda t, s: t.start_many(s, []),
        "start 101": lambda t, s: t.start_many(s, [a] * 101),
        "results item": lambda t, s: t.result_many(s, [{"attempt_id": a, "outcome": "x"}]),
        "results field": lambda t, s: t.result_many(
            s, [{"attempt_id": a, "outcome": "succeeded", "extra": 1}]
        ),
        "report-and-claim none": lambda t, s: t.report_and_claim(s, [], 1),
        "report-and-claim 101": lambda t, s: t.report_and_claim(
            s, [{"attempt_id": a, "outcome": "succeeded"}], 101
        ),
    }
    for name, call in calls.items():
        seen = []
        for t in (http, direct):
            with pytest.raises(ApiError) as caught:
                call(t, sessions[t])
            seen.append((type(caught.value).__name__, caught.value.code))
        assert seen[0] == seen[1], (name, seen)
        assert name == "start unknown" or seen[0][0] == "InvalidArgumentError", (name, seen)
    for t in (http, direct):
        t.goodbye(sessions[t])


def test_a_result_that_is_not_json_is_refused_by_both_transports_and_changes_nothing(
    orbit_server, tenant, worker_dsn, api, database
):
    """L2, W9: NaN is not JSON. The direct transport refuses it as the HTTP routes refuse a
    body holding it (InvalidArgumentError naming the field); the HTTP client refuses to send
    it at all (ValueError). Either way the attempt stays RUNNING and a good result then
    lands (the stored text was `NaN` before, which no strict client reads back)."""
    q = api.create_queue("not-json").queue_id
    http = HttpTransport(Client(orbit_server, tenant.token))
    direct = MysqlTransport(worker_dsn, tenant.application, "test", tenant.namespace)
    for t, refusal in ((direct, InvalidArgumentError), (http, ValueError)):
        _submit(api, q)
        session = t.hello("nan-" + secrets.token_hex(3), [q], 1, True).session_id
        [assignment] = t.claim(session, 1, 0)
        attempt = assignment["attempt_id"]
        t.start(session, attempt)
        with pytest.raises(refusal) as caught:
            t.result(session, attempt, "succeeded", False, {"ratio": float("nan")}, None)
        if refusal is InvalidArgumentError:
            assert "result: must be JSON" in str(caught.value)
        assert database.query(
            "SELECT state, result FROM attempts WHERE public_id = %s", (attempt,)
        ) == [{"state": "RUNNING", "result": None}]
        t.result(session, attempt, "succeeded", False, {"ratio": 0.5}, None)
        t.goodbye(session)


def test_a_worker_wider_than_one_request_claims_and_starts_in_requests_of_100(make_worker, api):
    """Capacity and prefetch past 100 (the most a claim, start or report may carry): the
    worker splits its requests instead of having every claim refused."""
    q = api.create_queue("wide").queue_id
    prefix = secrets.token_hex(4)
    items = [
        (
            f"{prefix}-{n}",
            SubmitTaskRequest(
                queue_id=q, handler="job", handler_version="v1", payload_version="v1", payload=n
            ),
        )
        for n in range(250)
    ]
    ids = [r.task_id for at in range(0, 250, 100) for r in api.submit_tasks(items[at : at + 100])]
    worker = make_worker([q], capacity=120, prefetch=40)
    worker.register("job", "v1", lambda event: None)
    worker.start()
    assert set(_wait(api, ids, timeout=60).values()) == {"SUCCEEDED"}


def test_least_privilege_account_can_run_worker_procedures_but_not_touch_tables(worker_dsn):
    conn = db.connect(worker_dsn)
    try:
        with conn.cursor() as cur:
            for sql in (
                "SELECT * FROM tasks LIMIT 1",
                "UPDATE tasks SET priority = 0",
                "INSERT INTO orbit_meta VALUES ('x', 'y', NOW())",
                f"CALL {routine_name('task_cancel')}(1, REPEAT('0', 32), 'me')",
                f"CALL {routine_name('tenant_bootstrap')}('a','b','c','d','e','f','g','h')",
                # helpers run only inside the worker procedures that call them
                f"CALL {routine_name('attempt_start_one')}"
                "(1, REPEAT('0', 32), REPEAT('0', 32), @attempt)",
            ):
                with pytest.raises(pymysql.err.MySQLError) as info:
                    cur.execute(sql)
                assert info.value.args[0] in (1142, 1370), sql  # table / routine access denied
            with pytest.raises(pymysql.err.MySQLError) as info:
                cur.execute(f"CALL {routine_name('worker_namespace')}('no-such-app', 'test', 'ns')")
            assert "NOT_FOUND" in str(info.value.args[1])  # allowed to run, answered normally
    finally:
        conn.close()


def test_l4_a_direct_worker_account_acts_only_for_its_namespace(
    orbit_server, tenant, tenant_factory, worker_dsn, database
):
    """L4: an account orbit-admin made for tenant A gets nothing of tenant B's: it cannot
    resolve B's names, nor call any worker routine in B's namespace, even with B's session and
    attempt (the routines run with their definer's rights, so each checks a caller that is not
    the definer). Tenant A's own work goes on. Bound to B as well, it may act for B."""
    b = tenant_factory()
    api_b = Client(orbit_server, b.token)
    try:
        task_b = _submit(api_b, b.queue_id)
    finally:
        api_b.close()
    with pytest.raises(NotFoundError):
        MysqlTransport(worker_dsn, b.application, "test", b.namespace)
    # B's session, made over HTTP, with a leased attempt: every worker routine refuses A's
    # account B's real ids, so that nothing but the account check can be what refuses it.
    session_b = database.call(
        "worker_hello",
        b.namespace_id,
        b.application_id,
        "b-1",
        4,
        1,
        json.dumps([b.queue_id]),
        "r",
        None,
    )[0][0]["session_id"]
    [granted] = database.call("worker_claim", b.namespace_id, session_b, 1, 0)[0]
    attempt = granted["attempt_id"]
    result = json.dumps(
        [{"attempt_id": attempt, "outcome": "succeeded", "retryable": 0, "result": "", "error": ""}]
    )
    conn = db.connect(worker_dsn)
    try:
        with conn.cursor() as cur:
            for routine, args in (
                (
                    "worker_hello",
                    (b.application_id, "intruder", 4, 1, json.dumps([b.queue_id]), "x", None),
                ),
                ("worker_claim", (session_b, 10, 0)),
                ("session_ready", (session_b,)),
                ("attempt_start", (session_b, attempt)),
                ("attempt_start_many", (session_b, json.dumps([attempt]), 0)),
                ("attempt_renew", (session_b, attempt)),
                ("attempt_result", (session_b, attempt, "succeeded", 0, None, None)),
                ("attempt_result_many", (session_b, result)),
                ("worker_report_claim", (session_b, result, 1, 1)),
                ("worker_goodbye", (session_b,)),
            ):
                marks = ", ".join(["%s"] * (1 + len(args)))
                with pytest.raises(pymysql.err.MySQLError) as info:
                    cur.execute(f"CALL {routine_name(routine)}({marks})", (b.namespace_id, *args))
                assert "NOT_FOUND: namespace not found" in str(info.value.args[1]), routine
    finally:
        conn.close()
    [session] = database.query(
        "SELECT state FROM worker_sessions WHERE public_id = %s", (session_b,)
    )
    assert session["state"] == "OPEN"  # B's session was not closed by A's account
    [row] = database.query("SELECT state FROM tasks WHERE public_id = %s", (task_b,))
    assert row["state"] == "LEASED"  # B's attempt was not started by A's account
    direct = MysqlTransport(worker_dsn, tenant.application, "test", tenant.namespace)
    assert direct.hello("mine-" + secrets.token_hex(3), [tenant.queue_id], 1, True).session_id
    database.call(
        "worker_account_bind", urlparse(worker_dsn).username, b.application, "test", b.namespace
    )
    assert (
        MysqlTransport(worker_dsn, b.application, "test", b.namespace).namespace_id
        == b.namespace_id
    )


@pytest.mark.parametrize(
    "protocol, says",
    [
        (None, "older than this worker (protocol 0, this worker speaks 3); run `orbit-migrate up`"),
        (WORKER_PROTOCOL - 1, "older than this worker (protocol 2, this worker speaks 3)"),
        (WORKER_PROTOCOL + 1, "newer than this worker (protocol 4, this worker speaks 3)"),
    ],
)
def test_the_direct_transport_refuses_worker_procedures_of_another_protocol(
    fresh_dsn, tmp_path, protocol, says
):
    """W9/K11: a direct worker whose database runs other worker procedures must say so when it
    connects; before, it ran until its first start failed as INTERNAL. ``None`` is a
    database from before worker_namespace answered a number."""
    schema.apply(fresh_dsn)
    database = Database(fresh_dsn, pool_size=1)
    tenant = make_tenant(database, tmp_path)
    assert MysqlTransport(fresh_dsn, tenant.application, "test", tenant.namespace).namespace_id
    answer_protocol(fresh_dsn, "worker_protocol", protocol)
    with pytest.raises(SchemaMismatch) as info:
        MysqlTransport(fresh_dsn, tenant.application, "test", tenant.namespace)
    assert says in str(info.value)
    database.close()
