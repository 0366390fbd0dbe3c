"""Schedules (K10): versions carry a fixed concurrency key; one task per fire even
with racing schedulers; a new version changes later fires only; missed fires fire once."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.server import schedules
from tests.helpers import Session, limited_credential, task_body


def _post(client, headers, name: str, task: dict, rule=None):
    """POST /v1/schedules of ``task``, every minute unless ``rule`` says otherwise."""
    return client.simulate_post(
        "/v1/schedules",
        headers=headers,
        json={"name": name, "rule": rule or {"interval_seconds": 60}, "definition": {"task": task}},
    )


def _create(client, tenant, key="", rule=None, name="every-minute"):
    task = task_body(tenant.queue_id, concurrency_key=key) if key else task_body(tenant.queue_id)
    result = _post(client, tenant.headers, name, task, rule)
    assert result.status_code == 201, result.text
    return result.json["data"]


def _make_due(dsn, schedule_id, seconds_ago=1):
    conn = db.connect(dsn)
    with conn.cursor() as cur:  # test clock control: the next fire is now in the past
        cur.execute(
            "UPDATE schedules SET next_fire_at = UTC_TIMESTAMP(6) - INTERVAL %s SECOND "
            "WHERE public_id = %s",
            (seconds_ago, schedule_id),
        )
    conn.close()


def _tasks(client, tenant):
    return client.simulate_get("/v1/tasks", headers=tenant.headers).json["data"]["tasks"]


def test_k10_fired_tasks_inherit_the_key_and_queue_behind_each_other(
    client, tenant, database, orbit_dsn
):
    sched = _create(client, tenant, key="report/daily")
    assert sched["definition"]["task"]["concurrency_key"] == "report/daily"
    for _ in range(2):
        _make_due(orbit_dsn, sched["schedule_id"], 120)
        assert schedules.fire_due(database) >= 1
    fired = _tasks(client, tenant)
    assert len(fired) == 2
    assert {t["concurrency_key"] for t in fired} == {"report/daily"}
    assert {t["schedule_id"] for t in fired} == {sched["schedule_id"]}
    assert all(t["schedule_version"] == 1 and t["fire_time"] for t in fired)
    session = Session(client, tenant)
    assert len(session.claim(max=4)) == 1  # the second waits for the key like a submitted task


def test_two_schedulers_racing_create_one_task_per_fire(client, tenant, database, orbit_dsn):
    sched = _create(client, tenant)
    _make_due(orbit_dsn, sched["schedule_id"], 30)
    fixed_now = schedules.utcnow()
    barrier = threading.Barrier(4)

    def race():
        barrier.wait()
        schedules.fire_due(database, now=lambda: fixed_now)

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(_tasks(client, tenant)) == 1
    fires = database.query(
        "SELECT COUNT(*) AS n FROM schedule_fires f JOIN schedules s "
        "ON s.id = f.schedule_id WHERE s.public_id = %s",
        (sched["schedule_id"],),
    )
    assert fires == [{"n": 1}]


def test_missed_fires_fire_once_not_a_storm(client, tenant, database, orbit_dsn):
    sched = _create(client, tenant)
    _make_due(orbit_dsn, sched["schedule_id"], 3600)  # an hour down: 60 slots missed
    schedules.fire_due(database)
    schedules.fire_due(database)
    assert len(_tasks(client, tenant)) == 1
    after = client.simulate_get(
        f"/v1/schedules/{sched['schedule_id']}", headers=tenant.headers
    ).json["data"]
    assert dt.datetime.fromisoformat(after["next_fire_at"].rstrip("Z")) > schedules.utcnow()


def test_a_new_version_changes_the_next_fires_only(client, tenant, database, orbit_dsn):
    sched = _create(client, tenant, key="v/one")
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    schedules.fire_due(database)
    task = task_body(tenant.queue_id, concurrency_key="v/two")
    v2 = client.simulate_post(
        f"/v1/schedules/{sched['schedule_id']}/versions",
        headers=tenant.headers,
        json={
            "definition": {"task": task},
            "rule": {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"},
        },
    )
    assert v2.status_code == 201 and v2.json["data"]["version"] == 2
    assert v2.json["data"]["rule"] == {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"}
    _make_due(orbit_dsn, sched["schedule_id"], 1)
    schedules.fire_due(database)
    fired = _tasks(client, tenant)  # in submission order
    assert [(t["concurrency_key"], t["schedule_version"]) for t in fired] == [
        ("v/one", 1),
        ("v/two", 2),
    ]


def test_pause_and_resume(client, tenant, database, orbit_dsn):
    sched = _create(client, tenant)
    paused = client.simulate_post(
        f"/v1/schedules/{sched['schedule_id']}/pause", headers=tenant.headers
    )
    assert paused.json["data"]["state"] == "PAUSED"
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    schedules.fire_due(database)
    assert _tasks(client, tenant) == []
    resumed = client.simulate_post(
        f"/v1/schedules/{sched['schedule_id']}/resume", headers=tenant.headers
    ).json["data"]
    assert resumed["state"] == "ACTIVE"
    assert dt.datetime.fromisoformat(resumed["next_fire_at"].rstrip("Z")) > schedules.utcnow()
    listed = client.simulate_get("/v1/schedules", headers=tenant.headers).json["data"]
    assert [s["schedule_id"] for s in listed] == [sched["schedule_id"]]


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"cron": "61 * * * *", "timezone": "UTC"}, "rule.cron"),
        ({"cron": "0 0 31 2 *", "timezone": "UTC"}, "rule.cron"),  # valid fields, never fires
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "rule.timezone"),
        ({"interval_seconds": 0}, "rule.interval_seconds"),
        ({"every": 5}, "rule"),
    ],
)
def test_invalid_rules_are_rejected_with_the_field(client, tenant, rule, field):
    result = client.simulate_post(
        "/v1/schedules",
        headers=tenant.headers,
        json={"name": "bad", "rule": rule, "definition": {"task": task_body(tenant.queue_id)}},
    )
    assert result.status_code == 400
    assert result.json["error"]["details"][0]["field"] == field


def test_invalid_keys_in_a_definition_are_rejected_by_the_same_validator(client, tenant):
    for key in ("x" * 192, " padded", None):
        result = _post(
            client, tenant.headers, "bad-key", task_body(tenant.queue_id, concurrency_key=key)
        )
        assert result.status_code == 400
        assert result.json["error"]["details"][0]["field"] == "definition.task.concurrency_key"


def test_schedules_of_other_namespaces_are_404(client, tenant_factory):
    a, b = tenant_factory(), tenant_factory()
    sched = _create(client, b)
    assert (
        client.simulate_get(f"/v1/schedules/{sched['schedule_id']}", headers=a.headers).status_code
        == 404
    )
    other_queue = task_body(b.queue_id)
    result = client.simulate_post(
        "/v1/schedules",
        headers=a.headers,
        json={"name": "x", "rule": {"interval_seconds": 60}, "definition": {"task": other_queue}},
    )
    assert result.status_code == 404


def test_the_fire_prefix_is_reserved(client, tenant):
    result = client.simulate_post(
        "/v1/tasks",
        json=task_body(tenant.queue_id),
        headers={**tenant.headers, "Idempotency-Key": "schedule:abc"},
    )
    assert result.status_code == 400


def test_cron_rule_is_dst_aware():
    rule = schedules.Rule("CRON", cron="30 2 * * *", timezone="Europe/Berlin")
    # 2026-03-29: clocks jump from 02:00 to 03:00 in Berlin; 02:30 local does not exist.
    nxt = rule.next_after(dt.datetime(2026, 3, 28, 12, 0))
    assert nxt.tzinfo is None and nxt > dt.datetime(2026, 3, 28, 12, 0)


def test_delete_keeps_history_and_stops_fires(client, tenant, database, orbit_dsn):
    sched = _create(client, tenant, key="gone/k")
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    schedules.fire_due(database)
    database.call("schedule_set_state", tenant.namespace_id, sched["schedule_id"], "DELETED", None)
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    schedules.fire_due(database)
    assert len(_tasks(client, tenant)) == 1  # no fire after the delete
    kept = database.query(
        "SELECT (SELECT COUNT(*) FROM schedule_versions v WHERE v.schedule_id "
        "= s.id) AS versions, (SELECT COUNT(*) FROM schedule_fires f WHERE "
        "f.schedule_id = s.id) AS fires FROM schedules s WHERE s.public_id = %s",
        (sched["schedule_id"],),
    )
    assert kept == [{"versions": 1, "fires": 1}]
    resumed = client.simulate_post(
        f"/v1/schedules/{sched['schedule_id']}/resume", headers=tenant.headers
    )
    assert resumed.status_code == 409


def test_a_scheduler_tick_reads_the_due_index_and_sorts_nothing_on_disk(client, tenant, orbit_dsn):
    """Every server process ticks about once a second. The due query started from
    schedule_versions (every version ever written) and sorted the joined rows, definition
    text and all, in an on-disk temporary table: one per tick, with nothing due too."""
    sched = _create(client, tenant, name="ticking")
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    one = Database(orbit_dsn, pool_size=1)  # one connection: its session counters are the tick's

    def on_disk() -> int:
        [row] = one.query("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
        return int(row["Value"])

    try:
        before = on_disk()
        assert schedules.fire_due(one) == 1
        assert schedules.fire_due(one) == 0  # nothing due now
        assert on_disk() - before == 0
    finally:
        one.close()


def test_l4_a_queue_limited_credential_sees_no_schedule_of_another_queue(client, tenant, database):
    """SPEC 1 / L4: a credential limited to queue Q1 neither lists, reads, pauses nor moves
    into Q1 (by a new version) a schedule whose task goes to Q2: each answers 404."""
    other = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "q2"})
    q2 = other.json["data"]["queue_id"]
    mine = _create(client, tenant, name="in-q1")
    theirs = client.simulate_post(
        "/v1/schedules",
        headers=tenant.headers,
        json={
            "name": "in-q2",
            "rule": {"interval_seconds": 60},
            "definition": {"task": task_body(q2)},
        },
    ).json["data"]
    limited = limited_credential(database, tenant, "queues:manage,tasks:read")
    listed = client.simulate_get("/v1/schedules", headers=limited).json["data"]
    assert [s["schedule_id"] for s in listed] == [mine["schedule_id"]]
    sid = theirs["schedule_id"]
    assert client.simulate_get(f"/v1/schedules/{sid}", headers=limited).status_code == 404
    assert client.simulate_post(f"/v1/schedules/{sid}/pause", headers=limited).status_code == 404
    moved = client.simulate_post(
        f"/v1/schedules/{sid}/versions",
        headers=limited,
        json={"definition": {"task": task_body(tenant.queue_id)}},
    )
    assert moved.status_code == 404
    unchanged = client.simulate_get(f"/v1/schedules/{sid}", headers=tenant.headers).json["data"]
    assert unchanged["state"] == "ACTIVE" and unchanged["version"] == 1
    assert unchanged["definition"]["task"]["queue_id"] == q2
    # the credential still manages its own queue's schedule
    assert (
        client.simulate_post(
            f"/v1/schedules/{mine['schedule_id']}/pause", headers=limited
        ).status_code
        == 200
    )


def test_l1_a_schedule_list_carries_definitions_within_the_budget(client, tenant, database):
    """L1: each schedule's definition may hold a task payload of up to 1 MiB, so the list
    carries definitions while their total stays within a request body's bound (the first
    whatever its size) and marks the schedules past it, which their own read answers whole.
    A queue-limited credential's list counts only the schedules it sees."""
    other = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "big-q2"})
    q2 = other.json["data"]["queue_id"]
    big = {"blob": "d" * 400_000}  # two definitions fit the budget, three do not

    def create(name: str, queue: str) -> str:
        result = _post(client, tenant.headers, name, task_body(queue, payload=big))
        assert result.status_code == 201, result.text
        return result.json["data"]["schedule_id"]

    ids = [create("big-a", tenant.queue_id), create("big-b", q2)]
    ids += [create("big-c", tenant.queue_id), create("big-d", tenant.queue_id)]
    listed = client.simulate_get("/v1/schedules", headers=tenant.headers).json["data"]
    assert [s["schedule_id"] for s in listed] == ids
    assert [s["definition"] is not None for s in listed] == [True, True, False, False]
    assert ["definition_omitted" in s for s in listed] == [False, False, True, True]
    whole = client.simulate_get(f"/v1/schedules/{ids[2]}", headers=tenant.headers).json["data"]
    assert whole["definition"]["task"]["payload"] == big and "definition_omitted" not in whole
    limited = limited_credential(database, tenant, "tasks:read")  # the tenant's first queue
    mine = client.simulate_get("/v1/schedules", headers=limited).json["data"]
    assert [s["schedule_id"] for s in mine] == [ids[0], ids[2], ids[3]]
    assert [s["definition"] is not None for s in mine] == [True, True, False]


def test_l1_a_namespace_holds_at_most_1000_schedules(client, tenant, database):
    """L1: a schedule list answers every schedule of the namespace, so their number is
    bounded: the 1,001st is refused with 429 QUOTA_EXCEEDED, and nothing is made."""
    [row] = database.query(
        "SELECT application_id FROM namespaces WHERE id = %s", (tenant.namespace_id,)
    )
    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:  # test setup: 999 schedules written straight to the table
            cur.executemany(
                "INSERT INTO schedules (public_id, namespace_id, application_id, name, state,"
                " current_version, created_at, updated_at) VALUES"
                " (%s, %s, %s, %s, 'PAUSED', 1, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
                [
                    (f"{n:032x}", tenant.namespace_id, row["application_id"], f"bulk-{n}")
                    for n in range(tenant.namespace_id * 10_000, tenant.namespace_id * 10_000 + 999)
                ],
            )
    finally:
        conn.close()
    _create(client, tenant, name="the-thousandth")
    refused = _post(client, tenant.headers, "one-too-many", task_body(tenant.queue_id))
    assert refused.status_code == 429, refused.text
    assert refused.json["error"]["code"] == "QUOTA_EXCEEDED"
    [count] = database.query(
        "SELECT COUNT(*) AS n FROM schedules WHERE namespace_id = %s", (tenant.namespace_id,)
    )
    assert count["n"] == 1000


def test_p5_a_fire_skips_while_the_last_one_still_holds_the_key(
    client, tenant, database, orbit_dsn
):
    """A schedule whose task says if_busy "skip" does not pile fires up behind a slow run:
    a fire while the last one's task holds the key ends CANCELLED, KEY_BUSY."""
    task = task_body(tenant.queue_id, concurrency_key="report/slow", if_busy="skip")
    made = _post(client, tenant.headers, "skipping", task)
    assert made.status_code == 201, made.text
    sched = made.json["data"]
    assert sched["definition"]["task"]["if_busy"] == "skip"
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    assert schedules.fire_due(database) >= 1
    [running] = Session(client, tenant).claim()
    _make_due(orbit_dsn, sched["schedule_id"], 120)
    assert schedules.fire_due(database) >= 1
    fired = {t["task_id"]: t for t in _tasks(client, tenant)}
    [second] = [t for t in fired if t != running["task"]["task_id"]]
    read = client.simulate_get(f"/v1/tasks/{second}", headers=tenant.headers).json["data"]
    assert (read["state"], read["cancel_reason"]) == ("CANCELLED", "KEY_BUSY")
