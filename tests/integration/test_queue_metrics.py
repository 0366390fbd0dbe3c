"""What operators alert on, per queue, in /metrics: ready and parked tasks, held keys, the
oldest parked wait, leases that expired before start in the last hour. Labelled by queue id
only: no per-key labels."""

from __future__ import annotations

import re

from falcon import testing
from prometheus_client import CollectorRegistry

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from orbit_shell.server.dbmetrics import QueueCollector
from tests.engine import Engine, sweep
from tests.helpers import Session, submit


def _gauges(text: str, queue_id: str) -> dict[str, float]:
    found = re.findall(rf'^(orbit_queue_\w+)\{{queue_id="{queue_id}"\}} (\S+)$', text, re.M)
    return {name: float(value) for name, value in found}


def test_per_queue_gauges_count_ready_parked_held_and_expired(orbit_dsn, database, tenant):
    client = testing.TestClient(
        create_app(Config(dsn=orbit_dsn), database=database, registry=CollectorRegistry())
    )
    holder = submit(client, tenant, None, 201, concurrency_key="m/k").json["data"]["task_id"]
    for _ in range(2):
        submit(client, tenant, None, 201, concurrency_key="m/k")  # parked behind it
    session = Session(client, tenant, capacity=1)
    [granted] = session.claim(1)
    assert granted["task"]["task_id"] == holder
    for _ in range(3):
        submit(client, tenant, None, 201)  # ready, unkeyed
    expiring = submit(client, tenant, None, 201, concurrency_key="m/other").json["data"]
    other = Session(client, tenant, capacity=5)
    leased = [a for a in other.claim(5) if a["task"]["task_id"] == expiring["task_id"]]
    Engine(database, tenant).expire(leased[0]["attempt_id"])
    sweep(database)
    page = client.simulate_get("/metrics").text
    gauges = _gauges(page, tenant.queue_id)
    assert gauges["orbit_queue_parked_tasks"] == 2
    assert gauges["orbit_queue_held_keys"] == 1
    assert gauges["orbit_queue_expired_leases_last_hour"] == 1
    assert gauges["orbit_queue_oldest_parked_seconds"] > 0
    # The other session took the three unkeyed tasks with the expiring one; the expired task
    # is back, READY.
    assert gauges["orbit_queue_ready_tasks"] == 1
    assert "m/k" not in page and "concurrency_key" not in page


def test_l1_scrapes_reuse_the_last_read_for_a_multiple_of_its_time(database, tenant):
    """However often /metrics is scraped, the queue query (which costs what the backlogs hold)
    runs again only once its last rows are older than REUSE times the read took."""
    now = [1000.0]
    ticks = iter(range(10**6))

    def clock() -> float:  # every call advances a microsecond: a read "takes" two of them
        return now[0] + next(ticks) * 1e-6

    collector = QueueCollector(database, clock=clock)

    def ready() -> float:
        for family in collector.collect():
            if family.name == "orbit_queue_ready_tasks":
                return next(s.value for s in family.samples if s.labels["queue_id"] == q)
        raise AssertionError("no ready gauge")

    q = tenant.queue_id
    Engine(database, tenant).submit()
    assert ready() == 1
    Engine(database, tenant).submit()
    assert ready() == 1  # the same rows: the read is fresh for REUSE x its time
    now[0] += QueueCollector.REUSE_MAX
    assert ready() == 2  # read again
