"""A queue's counts as `GET /v1/queues` and the dashboard read them: exact up to
``queuecounts.COUNT_MAX`` and flagged beyond it, exact at any size where a limit keeps the
queue row's counter, and read at a cost the backlog does not set (L1). Routes that only name a
queue (a task list filtered by it, the key list, a worker's hello) count nothing."""

from __future__ import annotations

import secrets

import pytest
from falcon import testing

from orbit_shell.engine.db import Database
from orbit_shell.server.app import create_app
from orbit_shell.server.auth import authenticate
from orbit_shell.server.config import Config
from orbit_shell.server.queuecounts import COUNT_MAX
from orbit_shell.server.scoped import Scope
from orbit_shell.server.ui import reads
from tests.engine import Engine, queue_counts
from tests.helpers import delete_tasks, waiting_in_bulk


def _read(client, tenant, queue_id: str) -> dict:
    r = client.simulate_get(f"/v1/queues/{queue_id}", headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json["data"]


def _lanes(database, queue: int) -> dict:
    [row] = database.query(
        "SELECT SUM(lane = 'READY') AS ready, SUM(lane = 'DELAYED') AS `delayed`, "
        "SUM(lane = 'BLOCKED') AS parked, SUM(state = 'NEEDS_REVIEW') AS needs_review "
        "FROM tasks WHERE queue_id = %s",
        (queue,),
    )
    return {k: int(v or 0) for k, v in row.items()}


def index_reads(conn) -> int:
    with conn.cursor() as cur:
        cur.execute(
            "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_key')"
        )
        return sum(int(r["Value"]) for r in cur.fetchall())


def _scope(database, tenant) -> Scope:
    return Scope(database, authenticate(database, tenant.headers["Authorization"]))


def test_v1_queue_counts_are_the_tasks_in_each_state(client, tenant, database):
    eng = Engine(database, tenant)
    plain = [eng.submit() for _ in range(3)]
    keyed = [eng.submit("qc/k") for _ in range(3)]
    session, _ = eng.hello(capacity=8)
    grants = {g["task_id"]: g["attempt_id"] for g in eng.claim(session, 8)}
    assert set(plain) < set(grants) and keyed[0] in grants and keyed[1] not in grants
    for attempt in grants.values():
        eng.start(session, attempt)
    eng.result(session, grants[plain[0]], "unknown")  # NEEDS_REVIEW, still unfinished
    eng.result(session, grants[plain[1]], "failed", retryable=1)  # back off: DELAYED
    eng.result(session, grants[plain[2]])  # done
    queue = eng.ids[tenant.queue_id]
    exact = queue_counts(database, queue)
    assert exact == {"active_attempts": 1, "unfinished_tasks": 5}
    data = _read(client, tenant, tenant.queue_id)
    assert {k: data[k] for k in exact} == exact
    assert not data["active_attempts_is_lower_bound"]
    assert not data["unfinished_tasks_is_lower_bound"]
    [listed] = client.simulate_get("/v1/queues", headers=tenant.headers).json["data"]
    assert listed == data
    # The dashboard's figures, lane by lane.
    [figures] = reads.queue_figures(_scope(database, tenant))
    assert {k: figures[k] for k in ("ready", "delayed", "parked", "needs_review")} == _lanes(
        database, queue
    )
    assert figures["held_keys"] == 1 and figures["lower_bounds"] == set()
    assert figures["oldest_parked_at"] is not None


@pytest.fixture
def backlog(database, tenant):
    """Three times the bound parked behind one key in the tenant's queue."""
    span = waiting_in_bulk(database, tenant, tenant.queue_id, 3 * COUNT_MAX, "BLOCKED", "qc/b")
    yield
    delete_tasks(database, span)


def test_v1_past_the_bound_a_count_reads_the_bound_flagged_and_costs_no_more(
    orbit_dsn, tenant, database, backlog
):
    one = Database(orbit_dsn, pool_size=1)  # every request on one connection: its counters
    client = testing.TestClient(create_app(Config(dsn=orbit_dsn), database=one))
    try:
        data = _read(client, tenant, tenant.queue_id)
        [q] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
        assert queue_counts(database, q["id"])["unfinished_tasks"] == 3 * COUNT_MAX
        assert data["unfinished_tasks"] == COUNT_MAX and data["unfinished_tasks_is_lower_bound"]
        assert data["active_attempts"] == 0 and not data["active_attempts_is_lower_bound"]

        def reads_of(method: str, path: str, **kw) -> int:
            """Index entries the request read (a count's LIMIT stops these; its derived
            table's own rows are Handler_read_rnd_next, as many again)."""
            with one.connection() as conn:
                before = index_reads(conn)
            r = client.simulate_request(method, path, headers=tenant.headers, **kw)
            assert r.status_code < 300, r.text
            with one.connection() as conn:
                return index_reads(conn) - before

        # Counting stops after COUNT_MAX + 1 entries of the parked lane (30,000 unbounded).
        assert reads_of("GET", f"/v1/queues/{tenant.queue_id}") < COUNT_MAX + 2_000
        assert reads_of("GET", "/v1/queues") < COUNT_MAX + 2_000
        for method, path, kw in (
            ("GET", "/v1/tasks", {"params": {"queue_id": tenant.queue_id, "limit": 1}}),
            ("GET", "/v1/keys", {}),
            (
                "POST",
                "/v1/workers/hello",
                {"json": {"worker_id": "w", "queue_ids": [tenant.queue_id], "capacity": 1}},
            ),
        ):
            assert reads_of(method, path, **kw) < 2_000, path
    finally:
        one.close()
    [figures] = reads.queue_figures(_scope(database, tenant))
    assert figures["parked"] == COUNT_MAX and "parked" in figures["lower_bounds"]
    assert figures["ready"] == 0 and "ready" not in figures["lower_bounds"]


def test_v1_a_queue_with_a_limit_reads_its_kept_counters_exact_past_the_bound(
    client, tenant, database
):
    r = client.simulate_post(
        "/v1/queues",
        json={"name": "qc-" + secrets.token_hex(4), "max_unfinished": 5 * COUNT_MAX},
        headers=tenant.headers,
    )
    assert r.status_code == 201, r.text
    queue_id = r.json["data"]["queue_id"]
    span = waiting_in_bulk(database, tenant, queue_id, COUNT_MAX + 5, "READY")
    try:
        # What task_submit keeps in the row under the limit, for the rows inserted around it.
        with database.connection() as conn, conn.cursor() as cur:
            cur.execute(
                "UPDATE queues SET unfinished_tasks = unfinished_tasks + %s WHERE public_id = %s",
                (COUNT_MAX + 5, queue_id),
            )
        task = client.simulate_post(
            "/v1/tasks",
            json={
                "queue_id": queue_id,
                "handler": "h",
                "handler_version": "v1",
                "payload_version": "v1",
                "payload": {},
            },
            headers={**tenant.headers, "Idempotency-Key": secrets.token_hex(8)},
        )
        assert task.status_code == 201, task.text
        data = _read(client, tenant, queue_id)
        assert data["unfinished_tasks"] == COUNT_MAX + 6  # the submission kept the counter
        assert not data["unfinished_tasks_is_lower_bound"]
    finally:
        delete_tasks(database, span)
