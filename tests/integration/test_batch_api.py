"""Batch routes: submit, start and report many in one request. Each item keeps the
single route's semantics, idempotency and error; a malformed request changes nothing.
Real MariaDB through the Falcon app."""

from __future__ import annotations

import secrets
import unicodedata

import pytest

from orbit_shell.server.guard import SubmitGuard
from tests.helpers import Session, limited_credential, submit, task_body


def batch_submit(client, tenant, items, expect=200):
    result = client.simulate_post("/v1/tasks/batch", headers=tenant.headers, json={"tasks": items})
    assert result.status_code == expect, result.text
    return result


def item(tenant, key=None, **fields):
    return {"idempotency_key": key or secrets.token_hex(8), **task_body(tenant.queue_id, **fields)}


def count_tasks(database, tenant) -> int:
    [row] = database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (tenant.namespace_id,)
    )
    return row["n"]


def test_each_item_gets_the_single_routes_status_and_error(
    client, database, tenant, tenant_factory
):
    single = submit(client, tenant, "seen-before", 201).json["data"]
    other = tenant_factory()
    results = batch_submit(
        client,
        tenant,
        [
            item(tenant, "new-1"),
            item(tenant, "seen-before"),  # same content as the single submission: a replay
            item(tenant, "seen-before", payload={"n": 2}),  # other content: a conflict
            {**item(tenant, "elsewhere"), "queue_id": other.queue_id},  # outside the namespace
            item(tenant, "new-1"),  # repeated inside the batch: a replay of the first item
        ],
    ).json["data"]["results"]
    assert [r["status"] for r in results] == [201, 200, 409, 404, 200]
    assert results[1]["data"] == {"task_id": single["task_id"], "created": False}
    assert results[2]["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    assert results[3]["error"]["code"] == "NOT_FOUND"
    assert results[4]["data"] == {"task_id": results[0]["data"]["task_id"], "created": False}
    detail = client.simulate_get(
        f"/v1/tasks/{results[0]['data']['task_id']}", headers=tenant.headers
    ).json["data"]
    assert detail["state"] == "WAITING" and detail["payload"] == {"n": 1}
    assert count_tasks(database, tenant) == 2
    assert count_tasks(database, other) == 0


@pytest.mark.parametrize(
    "body",
    [
        {"tasks": []},
        {"tasks": [{"queue_id": "0" * 32}]},
        {"tasks": "nope"},
        {"tasks": [{"idempotency_key": "schedule:x", "queue_id": "0" * 32}]},
        {"other": 1},
    ],
)
def test_a_malformed_batch_is_refused_whole_and_changes_nothing(client, database, tenant, body):
    if body.get("tasks") and isinstance(body["tasks"], list) and len(body["tasks"]) == 1:
        # one good item first, so a half-applied batch would show
        body = {"tasks": [item(tenant), *body["tasks"]]}
    before = count_tasks(database, tenant)
    result = client.simulate_post("/v1/tasks/batch", headers=tenant.headers, json=body)
    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_ARGUMENT"
    assert count_tasks(database, tenant) == before


@pytest.mark.parametrize("key", ["k1 ", " k1"])
def test_an_idempotency_key_with_a_space_at_an_end_is_refused_not_taken_for_another(
    client, database, tenant, key
):
    """The database compares keys padded with spaces, so "k1 " was the key "k1": replayed
    as its task, or refused as a conflict. A header cannot carry such a key (HTTP drops the
    spaces), and a batch item may not either."""
    first = client.simulate_post(
        "/v1/tasks/batch", headers=tenant.headers, json={"tasks": [item(tenant, "k1")]}
    )
    assert first.json["data"]["results"][0]["status"] == 201, first.text
    before = count_tasks(database, tenant)
    result = client.simulate_post(
        "/v1/tasks/batch",
        headers=tenant.headers,
        json={"tasks": [item(tenant), item(tenant, key, payload={"other": True})]},
    )
    assert result.status_code == 400, result.text
    assert result.json["error"]["details"] == [
        {"field": "tasks[1].idempotency_key", "message": "must not start or end with a space"}
    ]
    assert count_tasks(database, tenant) == before


def test_a_bad_item_names_its_index(client, tenant):
    result = client.simulate_post(
        "/v1/tasks/batch",
        headers=tenant.headers,
        json={"tasks": [item(tenant), item(tenant, priority=12)]},
    )
    assert result.status_code == 400
    assert result.json["error"]["details"][0]["field"] == "tasks[1].priority"


def test_more_than_100_items_are_refused(client, tenant):
    result = client.simulate_post(
        "/v1/tasks/batch",
        headers=tenant.headers,
        json={"tasks": [item(tenant) for _ in range(101)]},
    )
    assert result.status_code == 400


def test_quota_is_checked_per_item(client, tenant):
    queue = client.simulate_post(
        "/v1/queues", headers=tenant.headers, json={"name": "two", "max_unfinished": 2}
    ).json["data"]["queue_id"]
    results = batch_submit(
        client, tenant, [{**item(tenant), "queue_id": queue} for _ in range(3)]
    ).json["data"]["results"]
    assert [r["status"] for r in results] == [201, 201, 429]
    assert results[2]["error"]["code"] == "QUOTA_EXCEEDED"


def test_keyed_items_of_one_key_are_all_accepted_and_one_is_claimable(client, tenant):
    results = batch_submit(
        client, tenant, [item(tenant, concurrency_key="batch/k") for _ in range(3)]
    ).json["data"]["results"]
    assert [r["status"] for r in results] == [201, 201, 201]  # K4: busy is not an error
    session = Session(client, tenant)
    [only] = session.claim(max=3)
    assert only["task"]["task_id"] == results[0]["data"]["task_id"]


def test_batch_start_and_result_keep_per_attempt_semantics(client, tenant):
    for _ in range(3):
        submit(client, tenant, None, 201, concurrency_key=f"batch/{secrets.token_hex(3)}")
    mine, theirs = Session(client, tenant), Session(client, tenant)
    [b1] = theirs.claim(max=1)  # first, so the fair share does not halve mine (W2)
    a1, a2 = mine.claim(max=2)

    def post(path, body):
        return client.simulate_post(path, headers=tenant.headers, json=body)

    started = post(
        "/v1/attempts/start",
        {"session_id": mine.id, "attempt_ids": [a1["attempt_id"], b1["attempt_id"], "f" * 32]},
    ).json["data"]["results"]
    assert [r["status"] for r in started] == [200, 409, 404]
    assert started[0]["data"]["state"] == "RUNNING"
    assert started[0]["data"]["concurrency_token"] == a1["concurrency_token"]
    assert [r["error"]["code"] for r in started[1:]] == ["LEASE_LOST", "NOT_FOUND"]

    done = {"attempt_id": a1["attempt_id"], "outcome": "succeeded", "result": {"ok": 1}}
    reported = post(
        "/v1/attempts/result",
        {
            "session_id": mine.id,
            "results": [done, {"attempt_id": a2["attempt_id"], "outcome": "succeeded"}, done],
        },
    ).json["data"]["results"]
    assert [r["status"] for r in reported] == [200, 409, 200]
    assert reported[0]["data"]["duplicate"] is False
    assert reported[1]["error"]["code"] == "STATE_CONFLICT"  # a2 was never started
    assert reported[2]["data"]["duplicate"] is True  # the same result again changes nothing
    task = client.simulate_get(f"/v1/tasks/{a1['task']['task_id']}", headers=tenant.headers).json[
        "data"
    ]
    assert task["state"] == "SUCCEEDED" and task["result"] == {"ok": 1}
    other = client.simulate_get(f"/v1/tasks/{a2['task']['task_id']}", headers=tenant.headers).json[
        "data"
    ]
    assert other["state"] == "LEASED"


def test_batch_start_brief_answers_started_or_the_items_error(client, tenant, database):
    """`brief: true` (what the SDK worker asks): a started item answers {attempt_id, state}
    and nothing more, an item that did not start its error, as without it; a brief that is
    not a boolean is refused and starts nothing."""
    for _ in range(2):
        submit(client, tenant, None, 201)
    mine, theirs = Session(client, tenant), Session(client, tenant)
    [b] = theirs.claim(max=1)
    [a] = mine.claim(max=1)

    def post(body):
        return client.simulate_post("/v1/attempts/start", headers=tenant.headers, json=body)

    ids = [a["attempt_id"], b["attempt_id"], "f" * 32]
    refused = post({"session_id": mine.id, "attempt_ids": ids, "brief": "yes"})
    assert refused.status_code == 400 and refused.json["error"]["code"] == "INVALID_ARGUMENT"
    [row] = database.query("SELECT state FROM attempts WHERE public_id = %s", (a["attempt_id"],))
    assert row["state"] == "LEASED"
    started = post({"session_id": mine.id, "attempt_ids": ids, "brief": True}).json["data"]
    assert started["results"][0] == {
        "status": 200,
        "data": {"attempt_id": a["attempt_id"], "state": "RUNNING"},
    }
    assert [r["error"]["code"] for r in started["results"][1:]] == ["LEASE_LOST", "NOT_FOUND"]
    [row] = database.query("SELECT state FROM attempts WHERE public_id = %s", (a["attempt_id"],))
    assert row["state"] == "RUNNING"
    # Started again, as a resent request is: brief or not, the same attempt, still RUNNING.
    again = post({"session_id": mine.id, "attempt_ids": ids[:1], "brief": True}).json["data"]
    assert again["results"][0]["data"] == {"attempt_id": a["attempt_id"], "state": "RUNNING"}


def test_batch_start_brief_of_a_whole_group_answers_each_item_in_order(client, tenant, database):
    """A brief batch that starts every item (the SDK worker's start, answered from the group
    itself): one answer per item, each started, and every attempt RUNNING.
    The answer's rows are alike (seq, no error), so the client pairs them with the ids asked."""
    for _ in range(3):
        submit(client, tenant, None, 201)
    mine = Session(client, tenant)
    ids = [a["attempt_id"] for a in mine.claim(max=3)]
    asked = ids[::-1]  # not the grant order: an answer row short would fail the pairing
    started = client.simulate_post(
        "/v1/attempts/start",
        headers=tenant.headers,
        json={"session_id": mine.id, "attempt_ids": asked, "brief": True},
    ).json["data"]
    assert [r["data"] for r in started["results"]] == [
        {"attempt_id": i, "state": "RUNNING"} for i in asked
    ]
    rows = database.query("SELECT state FROM attempts WHERE public_id IN (%s, %s, %s)", tuple(ids))
    assert [r["state"] for r in rows] == ["RUNNING"] * 3


def test_batch_result_from_another_session_is_lease_lost(client, tenant):
    submit(client, tenant, None, 201)
    mine, theirs = Session(client, tenant), Session(client, tenant)
    [a] = mine.claim()
    assert mine.start(a["attempt_id"]).status_code == 200
    reported = client.simulate_post(
        "/v1/attempts/result",
        headers=tenant.headers,
        json={
            "session_id": theirs.id,
            "results": [{"attempt_id": a["attempt_id"], "outcome": "succeeded"}],
        },
    ).json["data"]["results"]
    assert reported[0]["error"]["code"] == "LEASE_LOST"


def test_the_guard_spends_one_token_per_item():
    guard = SubmitGuard(rate=1, burst=10, clock=lambda: 0.0)
    guard.take(1, 8)
    with pytest.raises(Exception) as refused:
        guard.take(1, 3)
    assert getattr(refused.value, "code", None) == "QUOTA_EXCEEDED"
    guard.take(1, 2)
    big = SubmitGuard(rate=1, burst=5, clock=lambda: 0.0)
    big.take(2, 100)  # larger than the burst: spends the whole burst, not refused forever
    with pytest.raises(Exception):  # noqa: B017 - the burst is spent
        big.take(2, 1)


def test_a_result_sent_by_batch_then_alone_is_one_result(client, tenant):
    """The batch carries the same canonical text as the single route, Unicode included, so the
    repeat is recognised as a duplicate (and a different result is refused)."""
    submit(client, tenant, None, 201)
    session = Session(client, tenant)
    [a] = session.claim()
    session.start(a["attempt_id"])
    odd = {"text": 'quote " backslash \\ newline \n emoji 😀 e\u0301', "n": [1, 2.5, None]}
    first = client.simulate_post(
        "/v1/attempts/result",
        headers=tenant.headers,
        json={
            "session_id": session.id,
            "results": [{"attempt_id": a["attempt_id"], "outcome": "succeeded", "result": odd}],
        },
    ).json["data"]["results"][0]
    assert first["data"]["duplicate"] is False
    again = session.finish(a["attempt_id"], result=odd)
    assert again.status_code == 200 and again.json["data"]["duplicate"] is True
    assert again.json["data"]["task"]["result"] == odd
    other = session.finish(a["attempt_id"], result={"text": "different"})
    assert other.json["error"]["code"] == "LEASE_LOST"


def test_keys_and_payloads_cross_the_batch_byte_for_byte(client, tenant):
    """K2: keys match on exact bytes (NFC and NFD are two keys) and a batch item replays the
    single route's submission of the same content, Unicode included."""
    nfc = "objet/" + unicodedata.normalize("NFC", "é")
    nfd = "objet/" + unicodedata.normalize("NFD", "é")
    payload = {"text": 'naïve "quoted" 😀', "list": [1, None, 2.5]}
    single = submit(client, tenant, "uni-1", 201, concurrency_key=nfc, payload=payload)
    results = batch_submit(
        client,
        tenant,
        [
            item(tenant, "uni-1", concurrency_key=nfc, payload=payload),
            item(tenant, "uni-1", concurrency_key=nfd, payload=payload),
            item(tenant, "uni-2", concurrency_key=nfd, payload=payload),
        ],
    ).json["data"]["results"]
    assert [r["status"] for r in results] == [200, 409, 201]
    assert results[0]["data"]["task_id"] == single.json["data"]["task_id"]
    detail = client.simulate_get(
        f"/v1/tasks/{results[2]['data']['task_id']}", headers=tenant.headers
    ).json["data"]
    assert detail["concurrency_key"] == nfd and detail["payload"] == payload
    # Two keys, so both are claimable at once.
    claimed = Session(client, tenant).claim(max=4)
    assert sorted(a["task"]["concurrency_key"] for a in claimed) == sorted([nfc, nfd])


def test_items_outside_the_credentials_queues_are_not_found_and_untouched(
    client, database, tenant, caplog
):
    """Each item out of a queue-limited credential's queues is 404 and untouched (L4). The
    worker routes' one-round-trip routines refuse such a credential (QUEUE_SCOPED) and the
    shell checks each item instead: an expected path, logged as no fault."""
    second = client.simulate_post(
        "/v1/queues", json={"name": "second"}, headers=tenant.headers
    ).json["data"]["queue_id"]
    limited = limited_credential(
        database, tenant, "tasks:submit,tasks:read,workers:connect,workers:consume"
    )
    submitted = client.simulate_post(
        "/v1/tasks/batch",
        headers=limited,
        json={"tasks": [item(tenant), {**item(tenant), "queue_id": second}]},
    ).json["data"]["results"]
    assert [r["status"] for r in submitted] == [201, 404]
    assert count_tasks(database, tenant) == 1

    # An attempt of the second queue, claimed by a session of a full credential.
    submit(client, tenant, None, 201, queue_id=second)
    outsider = Session(client, tenant, queue_ids=[second])
    [theirs] = outsider.claim()
    mine = Session(client, tenant)
    [own] = mine.claim()
    started = client.simulate_post(
        "/v1/attempts/start",
        headers=limited,
        json={"session_id": mine.id, "attempt_ids": [theirs["attempt_id"], own["attempt_id"]]},
    ).json["data"]["results"]
    assert [r["status"] for r in started] == [404, 200]
    reported = client.simulate_post(
        "/v1/attempts/result",
        headers=limited,
        json={
            "session_id": outsider.id,
            "results": [{"attempt_id": theirs["attempt_id"], "outcome": "succeeded"}],
        },
    ).json["data"]["results"]
    assert reported[0]["error"]["code"] == "NOT_FOUND"
    reported = client.simulate_post(  # a session in scope, an attempt out of it
        f"/v1/workers/{mine.id}/report-and-claim",
        headers=limited,
        json={"results": [{"attempt_id": theirs["attempt_id"], "outcome": "succeeded"}], "max": 0},
    ).json["data"]["results"]
    assert reported[0]["error"]["code"] == "NOT_FOUND"
    still = client.simulate_get(
        f"/v1/tasks/{theirs['task']['task_id']}", headers=tenant.headers
    ).json["data"]
    assert still["state"] == "LEASED"
    faults = [r for r in caplog.records if getattr(r, "action", "") == "db.error"]
    assert not faults, [r.getMessage() for r in faults]


def test_a_session_serving_a_queue_outside_the_credential_is_not_found(client, database, tenant):
    """SPEC 1: out of the credential's queue scope answers 404. A worker session on another
    queue is such a resource: a queue-limited credential that knows its id may not claim for
    it, report-and-claim on it or close it; its own sessions work as before."""
    second = client.simulate_post(
        "/v1/queues", json={"name": "second"}, headers=tenant.headers
    ).json["data"]["queue_id"]
    submit(client, tenant, None, 201, queue_id=second)
    submit(client, tenant, None, 201)
    outsider = Session(client, tenant, queue_ids=[second], capacity=2)
    limited = limited_credential(database, tenant, "workers:connect,workers:consume")
    calls = {
        "claim": ("claim", {"max": 1}),
        "report-and-claim": (
            "report-and-claim",
            {"results": [{"attempt_id": "0" * 32, "outcome": "succeeded"}], "max": 1},
        ),
        "goodbye": ("goodbye", {}),
    }
    for name, (route, body) in calls.items():
        answer = client.simulate_post(
            f"/v1/workers/{outsider.id}/{route}", headers=limited, json=body
        )
        assert answer.status_code == 404, (name, answer.text)
        assert answer.json["error"]["code"] == "NOT_FOUND"
    [row] = database.query(
        "SELECT state, in_flight FROM worker_sessions WHERE public_id = %s", (outsider.id,)
    )
    assert row == {"state": "OPEN", "in_flight": 0}
    # A session the limited credential opened on its own queue claims as before.
    hello = client.simulate_post(
        "/v1/workers/hello",
        headers=limited,
        json={
            "worker_id": "lim-" + secrets.token_hex(3),
            "queue_ids": [tenant.queue_id],
            "capacity": 2,
            "concurrency_keys": True,
        },
    )
    assert hello.status_code == 200, hello.text
    mine = hello.json["data"]["session_id"]
    claimed = client.simulate_post(
        f"/v1/workers/{mine}/claim", headers=limited, json={"max": 2}
    ).json["data"]["assignments"]
    assert len(claimed) == 1
