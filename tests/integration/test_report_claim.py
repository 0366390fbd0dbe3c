"""POST /v1/workers/{session_id}/report-and-claim (worker_report_claim): a worker's results and
its next claim in one transaction. Each result keeps the batch route's answer and error; the
claim keeps worker_claim's rules (W2: never more than the session's free capacity; K6: a key
freed by a result passes to its next task with a larger token) and never costs the results.
Real MariaDB through the Falcon app."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from orbit_shell.engine import db
from tests.helpers import Session, submit


def report_claim(client, tenant, session_id, results, max, expect=200, start=False):
    answer = client.simulate_post(
        f"/v1/workers/{session_id}/report-and-claim",
        headers=tenant.headers,
        json={"results": results, "max": max, "start": start},
    )
    assert answer.status_code == expect, answer.text
    return answer.json


def done(attempt_id, outcome="succeeded", **fields):
    return {"attempt_id": attempt_id, "outcome": outcome, **fields}


def running(session, n):
    """Claim ``n`` and start them: their attempt ids."""
    claimed = session.claim(n)
    assert len(claimed) == n
    for a in claimed:
        assert session.start(a["attempt_id"]).status_code == 200
    return [a["attempt_id"] for a in claimed]


def task_state(client, tenant, task_id):
    return client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]


def session_row(database, session_id):
    [row] = database.query(
        "SELECT state, in_flight FROM worker_sessions WHERE public_id = %s", (session_id,)
    )
    return row


def test_results_are_recorded_and_the_freed_slots_refilled_in_one_call(client, database, tenant):
    tasks = [submit(client, tenant).json["data"]["task_id"] for _ in range(5)]
    session = Session(client, tenant, capacity=2)
    first = running(session, 2)
    data = report_claim(
        client, tenant, session.id, [done(first[0], result={"ok": 1}), done(first[1])], 2
    )["data"]
    assert [r["status"] for r in data["results"]] == [200, 200]
    assert [r["data"]["attempt_id"] for r in data["results"]] == first
    assert not any(r["data"]["duplicate"] for r in data["results"])
    assert [a["task"]["task_id"] for a in data["assignments"]] == tasks[2:4]  # (priority, id)
    assert all(a["type"] == "task.assign" for a in data["assignments"])
    assert task_state(client, tenant, tasks[0])["state"] == "SUCCEEDED"
    assert task_state(client, tenant, tasks[0])["result"] == {"ok": 1}
    assert task_state(client, tenant, tasks[2])["state"] == "LEASED"
    assert session_row(database, session.id)["in_flight"] == 2
    # The same results again are duplicates, and claim only what is free (nothing).
    again = report_claim(client, tenant, session.id, [done(first[0], result={"ok": 1})], 2)
    assert again["data"]["results"][0]["data"]["duplicate"] is True
    assert again["data"]["assignments"] == []


def test_the_claim_takes_only_the_slots_free_after_the_results(client, database, tenant):
    """W2: never more than the session's free capacity, counted after this call's results."""
    for _ in range(6):
        submit(client, tenant)
    session = Session(client, tenant, capacity=3)
    held = running(session, 3)
    data = report_claim(client, tenant, session.id, [done(held[0])], 5)["data"]
    assert len(data["assignments"]) == 1
    assert session_row(database, session.id)["in_flight"] == 3
    # max 0 reports without claiming
    data = report_claim(client, tenant, session.id, [done(held[1])], 0)["data"]
    assert data["results"][0]["status"] == 200 and data["assignments"] == []
    assert session_row(database, session.id)["in_flight"] == 2


def test_a_freed_key_passes_to_its_next_task_with_a_larger_token_in_the_same_call(client, tenant):
    """K6/K7: the result releases the key and promotes its parked task; the claim in the same
    transaction grants it, with the next token."""
    key = "object/" + secrets.token_hex(4)
    first_task = submit(client, tenant, concurrency_key=key).json["data"]["task_id"]
    second_task = submit(client, tenant, concurrency_key=key).json["data"]["task_id"]
    session = Session(client, tenant, capacity=2)
    [first] = session.claim(2)  # the second is parked behind the key
    assert first["task"]["task_id"] == first_task
    assert session.start(first["attempt_id"]).status_code == 200
    data = report_claim(client, tenant, session.id, [done(first["attempt_id"])], 2)["data"]
    [second] = data["assignments"]
    assert second["task"]["task_id"] == second_task
    assert second["task"]["concurrency_key"] == key
    assert int(second["concurrency_token"]) == int(first["concurrency_token"]) + 1


def history(database, task_id):
    return [
        (r["event"], r["to_state"], r["concurrency_token"])
        for r in database.query(
            "SELECT h.event, h.to_state, h.concurrency_token FROM task_history h "
            "JOIN tasks t ON t.id = h.task_id WHERE t.public_id = %s ORDER BY h.id",
            (task_id,),
        )
    ]


def test_a_report_that_claims_with_start_hands_over_the_next_task_running(client, database, tenant):
    """W3 in one call: the freed key's next task is granted with the next token (K7) and
    started in the same transaction, its history CLAIMED then STARTED with that token; a start
    of it afterwards is a repeat and changes nothing."""
    key = "object/" + secrets.token_hex(4)
    tasks = [submit(client, tenant, concurrency_key=key).json["data"]["task_id"] for _ in range(2)]
    session = Session(client, tenant, capacity=2)
    [first] = session.claim(2, start=True)
    assert task_state(client, tenant, tasks[0])["state"] == "RUNNING"
    data = report_claim(client, tenant, session.id, [done(first["attempt_id"])], 2, start=True)
    [second] = data["data"]["assignments"]
    token = int(second["concurrency_token"])
    assert second["task"]["task_id"] == tasks[1] and token == int(first["concurrency_token"]) + 1
    assert task_state(client, tenant, tasks[1])["state"] == "RUNNING"
    [attempt] = database.query(
        "SELECT state, started_at IS NOT NULL AS started FROM attempts WHERE public_id = %s",
        (second["attempt_id"],),
    )
    assert attempt == {"state": "RUNNING", "started": 1}
    assert history(database, tasks[1])[-2:] == [
        ("CLAIMED", "LEASED", token),
        ("STARTED", "RUNNING", token),
    ]
    again = session.start(second["attempt_id"])
    assert again.status_code == 200 and again.json["data"]["state"] == "RUNNING"
    assert [e for e, _, _ in history(database, tasks[1])].count("STARTED") == 1
    # Without start the claim half grants LEASED, as before.
    third = submit(client, tenant, concurrency_key=key).json["data"]["task_id"]
    data = report_claim(client, tenant, session.id, [done(second["attempt_id"])], 2)
    assert [a["task"]["task_id"] for a in data["data"]["assignments"]] == [third]
    assert task_state(client, tenant, third)["state"] == "LEASED"


def test_an_attempt_started_by_its_claim_is_recovered_as_a_started_one(client, database, tenant):
    """SPEC 3: a lease that ends on an attempt its claim started leaves it UNKNOWN and its
    task NEEDS_REVIEW (the handler may have run), as one started on its own would; one only
    claimed expires and is claimed again."""
    started, leased = (submit(client, tenant).json["data"]["task_id"] for _ in range(2))
    session = Session(client, tenant, capacity=1)
    [a] = session.claim(1, start=True)
    other = Session(client, tenant, capacity=1)
    [b] = other.claim(1)
    assert {a["task"]["task_id"], b["task"]["task_id"]} == {started, leased}
    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:  # both leases end
            cur.execute(
                "UPDATE attempts SET lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
                "WHERE public_id IN (%s, %s)",
                (a["attempt_id"], b["attempt_id"]),
            )
    finally:
        conn.close()
    third = Session(client, tenant, capacity=2)
    [again] = third.claim(2)  # recovery runs inside the claim; only b's task comes back
    assert again["task"]["task_id"] == b["task"]["task_id"]
    assert task_state(client, tenant, a["task"]["task_id"])["state"] == "NEEDS_REVIEW"
    [row] = database.query("SELECT state FROM attempts WHERE public_id = %s", (a["attempt_id"],))
    assert row["state"] == "UNKNOWN"


def test_item_errors_are_answered_per_item_and_do_not_stop_the_claim(client, tenant):
    for _ in range(3):
        submit(client, tenant)
    session = Session(client, tenant, capacity=2)
    held = running(session, 2)
    data = report_claim(
        client,
        tenant,
        session.id,
        [done("0" * 32), done(held[0]), done(held[0], outcome="failed")],
        2,
    )["data"]
    codes = [r.get("error", {}).get("code") for r in data["results"]]
    assert codes[0] == "NOT_FOUND" and codes[1] is None
    assert codes[2] == "LEASE_LOST"  # a different result for an attempt already finished
    assert len(data["assignments"]) == 1  # the one slot the good result freed


def test_a_closed_session_has_its_results_recorded_and_claims_nothing(client, database, tenant):
    """A claim on a closed session is STATE_CONFLICT; here that must not undo the results."""
    task = submit(client, tenant).json["data"]["task_id"]
    submit(client, tenant)
    session = Session(client, tenant, capacity=1)
    [held] = running(session, 1)
    bye = client.simulate_post(f"/v1/workers/{session.id}/goodbye", headers=tenant.headers, json={})
    assert bye.status_code == 200, bye.text
    data = report_claim(client, tenant, session.id, [done(held)], 1)["data"]
    assert data["results"][0]["status"] == 200 and data["assignments"] == []
    assert task_state(client, tenant, task)["state"] == "SUCCEEDED"
    assert session_row(database, session.id) == {"state": "CLOSED", "in_flight": 0}
    claim = client.simulate_post(
        f"/v1/workers/{session.id}/claim", headers=tenant.headers, json={"max": 1}
    )
    assert claim.status_code == 409 and claim.json["error"]["code"] == "STATE_CONFLICT"


def test_an_unknown_session_answers_each_result_lease_lost(client, tenant):
    submit(client, tenant)
    session = Session(client, tenant, capacity=1)
    [held] = running(session, 1)
    data = report_claim(client, tenant, secrets.token_hex(16), [done(held)], 1)["data"]
    assert data["results"][0]["error"]["code"] == "LEASE_LOST"
    assert data["assignments"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"results": [], "max": 1},
        {"results": "nope", "max": 1},
        {"max": 1},
        {"results": None, "max": 1},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": 101},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": -1},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}]},
        {"results": [{"attempt_id": "0" * 32, "outcome": "maybe"}], "max": 1},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": 1, "wait_ms": 5},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": 1, "start": 1},
        {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": 1, "start": "yes"},
    ],
)
def test_a_malformed_request_is_refused_whole_and_changes_nothing(client, database, tenant, body):
    submit(client, tenant)
    session = Session(client, tenant, capacity=2)
    [held] = running(session, 1)
    if isinstance(body.get("results"), list) and body["results"]:
        body = {**body, "results": [done(held), *body["results"]]}  # a good item first
    answer = client.simulate_post(
        f"/v1/workers/{session.id}/report-and-claim", headers=tenant.headers, json=body
    )
    assert answer.status_code == 400, answer.text
    assert answer.json["error"]["code"] == "INVALID_ARGUMENT"
    [attempt] = database.query("SELECT state FROM attempts WHERE public_id = %s", (held,))
    assert attempt["state"] == "RUNNING"
    assert session_row(database, session.id)["in_flight"] == 1


@pytest.mark.parametrize("start", [1, "true", None])
def test_a_claim_whose_start_is_not_a_boolean_is_refused_and_grants_nothing(
    client, database, tenant, start
):
    task = submit(client, tenant).json["data"]["task_id"]
    session = Session(client, tenant, capacity=1)
    answer = client.simulate_post(
        f"/v1/workers/{session.id}/claim",
        headers=tenant.headers,
        json={"max": 1, "start": start},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json["error"]["code"] == "INVALID_ARGUMENT"
    assert "start" in answer.json["error"]["message"]
    assert task_state(client, tenant, task)["state"] == "WAITING"
    assert session_row(database, session.id)["in_flight"] == 0


def test_p2_a_report_writes_its_own_rows_before_it_waits_for_its_keys(
    client, database, tenant, orbit_dsn
):
    """A key of limit N has holders in several sessions, and each one's report needs the key
    row: a report takes its key rows last, after its attempts, tasks, permits and history are
    written, so it holds them only for the key's own changes, its claim and its commit. Shown
    by a report that waits for a key row another transaction holds: it has written rows by
    then (it wrote none when it took its keys first)."""
    key = f"pool-{secrets.token_hex(4)}"
    submit(client, tenant, concurrency_key=key)
    session = Session(client, tenant, capacity=1)
    [attempt] = running(session, 1)
    holder = db.connect(orbit_dsn, autocommit=False)
    out = {}
    try:
        with holder.cursor() as cur:
            cur.execute(
                "SELECT id FROM concurrency_resources WHERE namespace_id = %s "
                "AND concurrency_key = %s FOR UPDATE",
                (tenant.namespace_id, key),
            )

        def report():
            out["answer"] = report_claim(client, tenant, session.id, [done(attempt)], 1)

        thread = threading.Thread(target=report)
        thread.start()
        waits = []
        for _ in range(60):  # innodb_trx is refreshed when last read over 0.1 s before
            time.sleep(0.15)
            waits = database.query(
                "SELECT trx_rows_modified AS modified FROM information_schema.innodb_trx "
                "WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s",
                ("%FROM concurrency_resources%",),
            )
            if waits:
                break
        assert waits, "the report never waited for the held key row"
        assert waits[0]["modified"] > 0, "the report took its key row before writing its own"
    finally:
        holder.rollback()
        holder.close()
    thread.join(30)
    assert not thread.is_alive()
    [result] = out["answer"]["data"]["results"]
    assert result["status"] == 200
    [row] = database.query(
        "SELECT holder_attempt_id FROM concurrency_resources WHERE namespace_id = %s "
        "AND concurrency_key = %s",
        (tenant.namespace_id, key),
    )
    assert row["holder_attempt_id"] is None
