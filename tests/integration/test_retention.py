"""Retention of finished work (R1-R3): a namespace's window, the cleanup pass that deletes what
it has passed (a task with its attempts, history and Idempotency-Key record, old schedule fire
records, worker sessions that hold nothing), and what is never deleted (a task that needs
review, an unfinished one). After the window an Idempotency-Key creates a new task; within it
a replay is 200 and a changed request 409 (R2)."""

from __future__ import annotations

import json
import secrets

import pytest

from orbit_shell.engine import batches
from orbit_shell.engine.db import Database
from orbit_shell.server import cleanup
from tests.engine import submit_args
from tests.helpers import Session, submit, task_body


def _window(database, tenant, finished_for=None, keys_idle_for=None) -> dict:
    [[row]] = database.call("namespace_retention", tenant.namespace_id, finished_for, keys_idle_for)
    return row


def _tasks_in_each_state(client, tenant) -> dict[str, tuple[str, str]]:
    """name -> (task id, Idempotency-Key), one per state the cleanup must tell apart."""
    made = {}
    for name in ("succeeded", "failed", "cancelled", "review", "running", "waiting", "deadline"):
        idem = f"ret-{name}-{secrets.token_hex(4)}"
        fields = {"deadline_seconds": 1} if name == "deadline" else {}
        made[name] = (submit(client, tenant, idem, 201, **fields).json["data"]["task_id"], idem)
    cancel = client.simulate_post(
        f"/v1/tasks/{made['cancelled'][0]}/cancel", headers=tenant.headers
    )
    assert cancel.status_code == 200
    session = Session(client, tenant, capacity=8)
    grants = {g["task"]["task_id"]: g["attempt_id"] for g in session.claim(8, start=True)}
    for name, outcome in (("succeeded", "succeeded"), ("failed", "failed"), ("review", "unknown")):
        assert session.finish(grants[made[name][0]], outcome).status_code == 200
    # The deadline task was claimed too: it ends DEADLINE_EXCEEDED only when it is not running.
    assert session.finish(grants[made["deadline"][0]], "failed", retryable=True).status_code == 200
    return made, grants


def _finished_a_while_ago(database, tenant) -> None:
    """Whatever the window, a pass keeps a task for 5 s after it finished (its answer is read
    after its commit); these tests' tasks finished just now."""
    from orbit_shell.engine import db

    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE tasks SET finished_at = finished_at - INTERVAL 10 SECOND "
                "WHERE namespace_id = %s AND finished_at IS NOT NULL",
                (tenant.namespace_id,),
            )
    finally:
        conn.close()


def _state(client, tenant, task_id: str) -> int:
    return client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers)


def test_r1_r2_a_pass_deletes_finished_work_past_the_window_and_nothing_else(
    client, tenant, database
):
    made, grants = _tasks_in_each_state(client, tenant)
    made.pop("deadline")  # its state depends on the sweeper's timing; covered by the states
    finished = ("succeeded", "failed", "cancelled")
    kept = ("review", "running", "waiting")
    assert _window(database, tenant)["finished_for_seconds"] == 7 * 86400  # the default
    # Within the window: a replay answers the task, a changed request is refused.
    task, idem = made["succeeded"]
    assert submit(client, tenant, idem, 200).json["data"]["task_id"] == task
    submit(client, tenant, idem, 409, handler="other.handler")
    assert cleanup.run_pass(database, tenant.namespace_id)["tasks"] == 0
    _window(database, tenant, finished_for=0)
    assert cleanup.run_pass(database, tenant.namespace_id)["tasks"] == 0  # just finished
    _finished_a_while_ago(database, tenant)
    deleted = cleanup.run_pass(database, tenant.namespace_id)
    assert deleted["tasks"] >= 3 and deleted["idempotency_records"] == deleted["tasks"]
    assert deleted["attempts"] >= 2 and deleted["task_history"] >= 3 * deleted["tasks"]
    for name in finished:
        assert _state(client, tenant, made[name][0]).status_code == 404, name
    for name in kept:
        assert _state(client, tenant, made[name][0]).status_code == 200, name
    listed = client.simulate_get("/v1/tasks", headers=tenant.headers, params={"limit": 200})
    ids = {t["task_id"] for t in listed.json["data"]["tasks"]}
    assert not ids & {made[n][0] for n in finished} and {made[n][0] for n in kept} <= ids
    rows = database.query(
        "SELECT (SELECT COUNT(*) FROM attempts a JOIN tasks t ON t.id = a.task_id "
        " WHERE t.namespace_id = %s) AS attempts, "
        "(SELECT COUNT(*) FROM task_history WHERE namespace_id = %s) AS history, "
        "(SELECT COUNT(*) FROM idempotency_records WHERE namespace_id = %s) AS records, "
        "(SELECT COUNT(*) FROM tasks WHERE namespace_id = %s) AS tasks",
        [tenant.namespace_id] * 4,
    )
    assert rows[0]["tasks"] == rows[0]["records"]  # no record left without its task
    assert cleanup.run_pass(database, tenant.namespace_id)["tasks"] == 0  # nothing left to do
    # After the window the key is free: the same request makes a new task.
    again = submit(client, tenant, idem, 201).json["data"]["task_id"]
    assert again != task
    # A late report of a deleted task's attempt is refused, as any stale one.
    late = client.simulate_post(
        f"/v1/attempts/{grants[made['succeeded'][0]]}/result",
        headers=tenant.headers,
        json={"session_id": _session_of(client, tenant), "outcome": "succeeded"},
    )
    assert late.status_code in (404, 409), late.text


def _session_of(client, tenant) -> str:
    return Session(client, tenant, capacity=1).id


def test_r1_closed_sessions_and_old_fire_records_go_in_the_same_window(
    client, tenant, database, eng
):
    busy = Session(client, tenant, capacity=2, worker_id="busy")
    submit(client, tenant, None, 201)
    assert len(busy.claim(1)) == 1
    gone = Session(client, tenant, capacity=1, worker_id="gone")
    assert (
        client.simulate_post(
            f"/v1/workers/{gone.id}/goodbye", headers=tenant.headers, json={}
        ).status_code
        == 200
    )
    eng.force(
        "UPDATE worker_sessions SET last_seen_at = last_seen_at - INTERVAL 1 DAY "
        "WHERE namespace_id = %s",
        tenant.namespace_id,
    )
    made = client.simulate_post(
        "/v1/schedules",
        headers=tenant.headers,
        json={
            "name": "ret",
            "rule": {"interval_seconds": 3600},
            "definition": {"task": task_body(tenant.queue_id)},
        },
    )
    assert made.status_code == 201, made.text
    [sched] = database.query(
        "SELECT id FROM schedules WHERE public_id = %s", (made.json["data"]["schedule_id"],)
    )
    eng.force(
        "INSERT INTO schedule_fires (schedule_id, fire_time, version, task_id, created_at) "
        "VALUES (%s, UTC_TIMESTAMP(6) - INTERVAL 2 DAY, 1, NULL, UTC_TIMESTAMP(6)), "
        "(%s, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 1, NULL, UTC_TIMESTAMP(6))",
        sched["id"],
        sched["id"],
    )
    _window(database, tenant, finished_for=3600)
    deleted = cleanup.run_pass(database, tenant.namespace_id)
    assert deleted["worker_sessions"] == 1 and deleted["schedule_fires"] == 1
    left = database.query(
        "SELECT worker_id FROM worker_sessions WHERE namespace_id = %s", (tenant.namespace_id,)
    )
    assert [r["worker_id"] for r in left] == ["busy"]  # it holds an attempt
    assert database.query(
        "SELECT COUNT(*) AS n FROM worker_session_queues q JOIN worker_sessions s "
        "ON s.id = q.session_id WHERE s.namespace_id = %s",
        (tenant.namespace_id,),
    ) == [{"n": 1}]
    assert _window(database, tenant)["cleaned_at"] is not None


def test_r3_orbit_admin_retention_and_cleanup(client, tenant, database, monkeypatch, capsys):
    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", database.dsn)
    names = ["--application", tenant.application, "--environment", "test"]
    names += ["--namespace", tenant.namespace]
    assert admin(["retention", *names]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["finished_for_seconds"] == shown["keys_idle_for_seconds"] == 604800
    assert admin(["retention", *names, "--finished-for", "0", "--keys-idle-for", "60"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["finished_for_seconds"], shown["keys_idle_for_seconds"]) == (0, 60)
    task = submit(client, tenant, None, 201).json["data"]["task_id"]
    client.simulate_post(f"/v1/tasks/{task}/cancel", headers=tenant.headers)
    _finished_a_while_ago(database, tenant)
    assert admin(["cleanup", *names]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["tasks"] == 1 and set(printed) == set(cleanup.TABLES)
    for bad in (["--finished-for", "-1"], ["--finished-for", "x"], ["--keys-idle-for", "1e9"]):
        with pytest.raises(SystemExit):
            admin(["retention", *names, *bad])
    assert (
        admin(["cleanup", "--application", "nope", "--environment", "test"] + ["--namespace", "ns"])
        == 1
    )
    assert "NOT_FOUND" in capsys.readouterr().err


def test_r6_metrics_say_the_cleanup_lag_and_last_pass(client, tenant, database):
    _window(database, tenant, finished_for=0)
    task = submit(client, tenant, None, 201).json["data"]["task_id"]
    client.simulate_post(f"/v1/tasks/{task}/cancel", headers=tenant.headers)
    page = client.simulate_get("/metrics").text
    assert "orbit_cleanup_lag_seconds" in page and "orbit_key_rows" in page
    lag = [
        float(line.split()[-1])
        for line in page.splitlines()
        if line.startswith("orbit_cleanup_lag_seconds ")
    ]
    assert lag and lag[0] >= 0
    cleanup.run_pass(database, tenant.namespace_id)
    assert "orbit_cleanup_last_pass_timestamp_seconds" in client.simulate_get("/metrics").text


class _DeletedBetween(Database):
    """The pool the test's calls go through, with the cleanup's transaction run where the race
    puts it: after the replay's read of its record (the first call sees the record and no task:
    its tasks row is deleted beforehand), before the call is made again."""

    def __init__(self, dsn: str, record: tuple[int, str]) -> None:
        super().__init__(dsn)
        self.record, self.calls = record, 0

    def call(self, procedure, *args):
        sets = super().call(procedure, *args)
        self.calls += 1
        if self.calls == 1:
            with self.connection() as conn, conn.cursor() as cur:
                cur.execute(
                    "DELETE FROM idempotency_records"
                    " WHERE namespace_id = %s AND idempotency_key = %s",
                    self.record,
                )
        return sets


def test_r2_a_replay_that_meets_its_deletion_creates_the_task_anew(tenant, database):
    """A replay reads the Idempotency-Key record, commits, then reads its task for the answer: a
    cleanup that deletes both in between leaves it a record and no task. It is made again,
    which creates the task anew (R2), instead of failing for want of an answer."""
    idem = f"race-{secrets.token_hex(4)}"
    queue = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    args = submit_args(tenant.namespace_id, queue[0]["id"], idem)
    first = batches.submit_one(database, "task_submit", *args)
    assert first["created"] == 1
    # The half of the cleanup's transaction that the replay's answer sees committed.
    with database.connection() as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM tasks WHERE public_id = %s", (first["task_id"],))
    racing = _DeletedBetween(database.dsn, (tenant.namespace_id, idem))
    try:
        again = batches.submit_one(racing, "task_submit", *args)
    finally:
        racing.close()
    assert racing.calls == 2 and again["created"] == 1 and again["task_id"] != first["task_id"]
