"""Task API: submission and idempotency, K2 at the edge, quotas, deadlines, queries,
cancel and resolve, history. Real MariaDB through the Falcon app."""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import unicodedata

import pytest
from falcon import testing

from orbit_shell.engine.db import Database
from orbit_shell.server.auth import Principal
from orbit_shell.server.scoped import Scope
from tests.engine import handler_reads, submit_item
from tests.helpers import Session, limited_credential, submit, task_body

SEED = {
    "handler": "object.update",
    "handler_version": "v1",
    "payload_version": "v1",
    "payload": {"operation_ref": "update-001", "object_ref": "objects/42"},
}


def test_seed_request_201_then_200_then_409_when_only_the_key_changes(client, tenant):
    first = submit(
        client, tenant, "update-object-42-operation-001", 201, **SEED, concurrency_key="object/42"
    )
    task = first.json["data"]
    assert task["state"] == "WAITING" and task["concurrency_key"] == "object/42"
    again = submit(
        client, tenant, "update-object-42-operation-001", 200, **SEED, concurrency_key="object/42"
    )
    assert again.json["data"]["task_id"] == task["task_id"]
    other = submit(
        client, tenant, "update-object-42-operation-001", 409, **SEED, concurrency_key="object/43"
    )
    assert other.json["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    unkeyed = submit(client, tenant, "update-object-42-operation-001", 409, **SEED)
    assert unkeyed.json["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    listed = client.simulate_get("/v1/tasks", headers=tenant.headers).json["data"]["tasks"]
    assert [t["task_id"] for t in listed] == [task["task_id"]]


def test_a_submission_answers_the_task_as_a_read_does(client, tenant):
    """POST /v1/tasks answers from task_submit's own answer (no second read):
    the same detail GET /v1/tasks/{id} gives, first acceptance and replay alike, and a replay
    shows the task as it is now."""
    fields = {**SEED, "concurrency_key": "object/7", "business_key": "b-7", "deadline_seconds": 60}
    first = submit(client, tenant, "answer-as-read", 201, **fields).json["data"]
    task_url = f"/v1/tasks/{first['task_id']}"
    assert first == client.simulate_get(task_url, headers=tenant.headers).json["data"]
    cancel = client.simulate_post(task_url + "/cancel", headers=tenant.headers)
    assert cancel.status_code == 200, cancel.text
    replay = submit(client, tenant, "answer-as-read", 200, **fields).json["data"]
    assert replay["state"] == "CANCELLED"
    assert replay == client.simulate_get(task_url, headers=tenant.headers).json["data"]


def test_a_remembered_queue_is_still_out_of_a_limited_credential_s_scope(client, tenant, database):
    """The submit routes remember queue ids per process. A queue the full
    credential submitted to, and so put in that memory, stays 404 for a credential of the same
    namespace limited to another queue, single and batched, and nothing is written."""
    second = client.simulate_post(
        "/v1/queues", json={"name": "second"}, headers=tenant.headers
    ).json["data"]["queue_id"]
    submit(client, tenant, queue_id=second)  # remembered now
    limited = {**limited_credential(database, tenant, "tasks:submit"), "Idempotency-Key": "k-1"}
    refused = client.simulate_post("/v1/tasks", json=task_body(second), headers=limited)
    assert refused.status_code == 404 and refused.json["error"]["code"] == "NOT_FOUND"
    batch = client.simulate_post(
        "/v1/tasks/batch",
        json={"tasks": [{**task_body(second), "idempotency_key": "k-2"}]},
        headers=limited,
    )
    assert batch.json["data"]["results"][0]["error"]["code"] == "NOT_FOUND"
    assert submit(client, tenant, "k-3", queue_id=tenant.queue_id, expect=None).status_code == 201
    assert (
        client.simulate_post(
            "/v1/tasks", json=task_body(tenant.queue_id), headers=limited
        ).status_code
        == 201
    )
    [count] = database.query(
        "SELECT COUNT(*) AS n FROM tasks t JOIN queues q ON q.id = t.queue_id "
        "WHERE q.public_id = %s",
        (second,),
    )
    assert count["n"] == 1


@pytest.mark.parametrize(
    "change",
    [
        {"payload": {"x": 2}},
        {"priority": 1},
        {"business_key": "b"},
        {"handler_version": "v2"},
        {"deadline_seconds": 60},
    ],
)
def test_any_other_content_is_an_idempotency_conflict(client, tenant, change):
    submit(client, tenant, "same-key", 201)
    assert (
        submit(client, tenant, "same-key", 409, **change).json["error"]["code"]
        == "IDEMPOTENCY_CONFLICT"
    )


def test_explicit_defaults_are_the_same_content(client, tenant):
    submit(client, tenant, "defaults", 201)
    submit(client, tenant, "defaults", 200, priority=5, concurrency_key="", business_key="")


def test_concurrent_duplicates_create_exactly_one_task(app, tenant, database):
    results = []

    def go():
        c = testing.TestClient(app)
        results.append(submit(c, tenant, "racing", None, concurrency_key="object/race"))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in results) == [200] * 7 + [201]
    assert len({r.json["data"]["task_id"] for r in results}) == 1
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (tenant.namespace_id,)
    ) == [{"n": 1}]


@pytest.mark.parametrize(
    ("key", "status"),
    [("k" * 191, 201), ("k" * 192, 400), ("é" * 191, 201), (None, 400), (" x", 400)],
)
def test_k2_at_the_api_edge(client, tenant, key, status):
    result = submit(client, tenant, None, status, concurrency_key=key)
    if status == 400:
        assert result.json["error"]["details"][0]["field"] == "concurrency_key"
    else:
        assert result.json["data"]["concurrency_key"] == key


def test_lone_surrogate_key_is_rejected(client, tenant):
    body = (
        f'{{"queue_id":"{tenant.queue_id}","handler":"h","handler_version":"v","payload_version":"v",'
        '"payload":1,"concurrency_key":"a\\ud800"}'
    )
    result = client.simulate_post(
        "/v1/tasks",
        body=body,
        headers={**tenant.headers, "Idempotency-Key": "s1", "Content-Type": "application/json"},
    )
    assert result.status_code == 400
    assert result.json["error"]["details"][0]["field"] == "concurrency_key"


def test_keys_match_exact_bytes(client, tenant):
    """object/A and object/a, NFC and NFD are different keys: each gets its own permit."""
    keys = [
        "object/A",
        "object/a",
        unicodedata.normalize("NFC", "café"),
        unicodedata.normalize("NFD", "café"),
    ]
    for key in keys:
        submit(client, tenant, None, 201, concurrency_key=key)
    granted = Session(client, tenant, capacity=10).claim(max=10)
    assert sorted(a["task"]["concurrency_key"] for a in granted) == sorted(keys)
    assert {a["concurrency_token"] for a in granted} == {"1"}
    for key in keys:
        listed = client.simulate_get(
            "/v1/tasks", params={"concurrency_key": key}, headers=tenant.headers
        ).json["data"]["tasks"]
        assert [t["concurrency_key"] for t in listed] == [key]


def test_bad_fields_are_400_with_the_field_named(client, tenant):
    for change, field in [
        ({"priority": 11}, "priority"),
        ({"payload_version": 3}, "payload_version"),
        ({"unknown": 1}, "unknown"),
        ({"max_attempts": 0}, "max_attempts"),
    ]:
        result = submit(client, tenant, None, 400, **change)
        assert result.json["error"]["details"][0]["field"] == field
    missing = client.simulate_post(
        "/v1/tasks", json=task_body(tenant.queue_id), headers=tenant.headers
    )
    assert missing.status_code == 400
    assert missing.json["error"]["details"][0]["field"] == "Idempotency-Key"


def test_queue_unfinished_quota_edges(client, tenant):
    queue = client.simulate_post(
        "/v1/queues", headers=tenant.headers, json={"name": "small", "max_unfinished": 2}
    ).json["data"]
    q = queue["queue_id"]
    submit(client, tenant, None, 201, queue_id=q, concurrency_key="quota/k")
    second = submit(
        client, tenant, None, 201, queue_id=q, concurrency_key="quota/k"
    )  # parked: counts
    third = submit(client, tenant, None, 429, queue_id=q)
    assert third.json["error"]["code"] == "QUOTA_EXCEEDED"
    cancel = client.simulate_post(
        f"/v1/tasks/{second.json['data']['task_id']}/cancel", headers=tenant.headers
    )
    assert cancel.status_code == 200 and cancel.json["data"]["state"] == "CANCELLED"
    submit(client, tenant, None, 201, queue_id=q)


def test_application_quota_and_needs_review_counts(client, tenant, orbit_dsn):

    Database(orbit_dsn).call("application_set_quota", tenant.application, None, 1)
    first = submit(client, tenant, None, 201).json["data"]
    assert submit(client, tenant, None, 429).json["error"]["code"] == "QUOTA_EXCEEDED"
    session = Session(client, tenant)
    [a] = session.claim()
    session.start(a["attempt_id"])
    assert (
        session.finish(a["attempt_id"], "unknown").json["data"]["task"]["state"] == "NEEDS_REVIEW"
    )
    submit(client, tenant, None, 429)  # NEEDS_REVIEW still counts toward the backlog quota
    resolved = client.simulate_post(
        f"/v1/tasks/{first['task_id']}/resolve",
        headers=tenant.headers,
        json={"state": "SUCCEEDED", "note": "checked by hand"},
    )
    assert resolved.json["data"]["state"] == "SUCCEEDED"
    submit(client, tenant, None, 201)


def test_deadline_is_absolute_on_the_database_clock(client, tenant):
    task = submit(client, tenant, None, 201, deadline_seconds=3600).json["data"]
    created = dt.datetime.fromisoformat(task["created_at"].rstrip("Z"))
    deadline = dt.datetime.fromisoformat(task["deadline_at"].rstrip("Z"))
    assert deadline - created == dt.timedelta(seconds=3600)


def test_detail_list_filters_and_cursor_pagination(client, tenant):
    ids = [
        submit(
            client,
            tenant,
            None,
            201,
            business_key=f"order-{i % 2}",
            concurrency_key="page/k" if i == 0 else "",
        ).json["data"]["task_id"]
        for i in range(5)
    ]
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = client.simulate_get("/v1/tasks", params=params, headers=tenant.headers).json["data"]
        assert len(page["tasks"]) <= 2
        seen += [t["task_id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ids
    by_business = client.simulate_get(
        "/v1/tasks", params={"business_key": "order-1"}, headers=tenant.headers
    ).json["data"]["tasks"]
    assert [t["task_id"] for t in by_business] == [ids[1], ids[3]]
    by_key = client.simulate_get(
        "/v1/tasks", params={"concurrency_key": "page/k"}, headers=tenant.headers
    ).json["data"]["tasks"]
    assert [t["task_id"] for t in by_key] == [ids[0]]
    by_state = client.simulate_get(
        "/v1/tasks",
        params={"state": "WAITING", "queue_id": tenant.queue_id},
        headers=tenant.headers,
    ).json["data"]["tasks"]
    assert len(by_state) == 5
    detail = client.simulate_get(f"/v1/tasks/{ids[1]}", headers=tenant.headers).json["data"]
    assert "concurrency_key" not in detail and detail["business_key"] == "order-1"
    for bad in ({"limit": "201"}, {"limit": "0"}, {"cursor": "!!"}, {"state": "NOPE"}, {"x": "1"}):
        result = client.simulate_get("/v1/tasks", params=bad, headers=tenant.headers)
        assert result.status_code == 400, bad


def test_the_business_key_filter_is_byte_exact(client, tenant):
    """The filter is an exact match: the column's collation pads with spaces (PAD SPACE), so
    a plain ``=`` let ``order-1`` list the tasks of ``order-1 `` too, another business key
    (a business key is free text and may end in spaces; only a concurrency key may not)."""
    plain, padded, _, spaces = (
        submit(client, tenant, None, 201, business_key=key).json["data"]["task_id"]
        for key in ("order-1", "order-1  ", "", "   ")
    )

    def listed(key: str) -> list[str]:
        page = client.simulate_get(
            "/v1/tasks", params={"business_key": key}, headers=tenant.headers
        ).json["data"]
        return [t["task_id"] for t in page["tasks"]]

    assert listed("order-1") == [plain]
    assert listed("order-1  ") == [padded]
    assert listed("   ") == [spaces]


def test_the_dashboards_handler_filter_is_byte_exact(client, tenant, database):
    """The dashboard's handler filter reads through the same page (Scope.tasks): ``h`` does
    not list the tasks of handler ``h `` either."""
    plain, padded = (
        submit(client, tenant, None, 201, handler=name).json["data"]["task_id"]
        for name in ("h", "h ")
    )
    principal = Principal(
        0, tenant.application_id, 0, tenant.namespace_id, frozenset(), True, frozenset()
    )
    scope = Scope(database, principal)
    for name, task in (("h", plain), ("h ", padded)):
        assert [r["public_id"] for r in scope.tasks({"handler": name}, 0, 10)] == [task]


def test_a_list_cursor_is_a_task_id_the_credential_may_see(client, tenant_factory, database):
    """A page's cursor is its last task's public id. It was the internal id, one sequence
    for the whole server: a tenant paging its own tasks watched it advance with every
    tenant's submissions. A cursor naming a task of another namespace or of a queue outside
    the credential's scope is 404 like one naming no task (SPEC 1: nothing tells them apart);
    an internal id is no cursor at all (400)."""
    mine, theirs = tenant_factory(), tenant_factory()
    ids = [submit(client, mine, None, 201).json["data"]["task_id"] for _ in range(3)]
    other_namespace = submit(client, theirs, None, 201).json["data"]["task_id"]
    second = client.simulate_post("/v1/queues", json={"name": "second"}, headers=mine.headers)
    other_queue = submit(client, mine, None, 201, queue_id=second.json["data"]["queue_id"]).json[
        "data"
    ]["task_id"]
    limited = limited_credential(database, mine, "tasks:read")

    def page(headers, cursor=None):
        params = {"limit": "1", **({"cursor": cursor} if cursor else {})}
        return client.simulate_get("/v1/tasks", params=params, headers=headers)

    first = page(limited).json["data"]
    assert [t["task_id"] for t in first["tasks"]] == [ids[0]] and first["next_cursor"] == ids[0]
    assert [t["task_id"] for t in page(limited, ids[0]).json["data"]["tasks"]] == [ids[1]]
    assert [t["task_id"] for t in page(mine.headers, other_queue).json["data"]["tasks"]] == []
    [row] = database.query("SELECT id FROM tasks WHERE public_id = %s", (ids[0],))
    unseen = [page(limited, cursor) for cursor in (other_namespace, other_queue, "f" * 32)]
    assert {(r.status_code, r.json["error"]["message"]) for r in unseen} == {
        (404, "the cursor names no task this credential can read")
    }
    result = page(limited, str(row["id"]))
    assert result.status_code == 400 and result.json["error"]["details"] == [
        {"field": "cursor", "message": "is not a cursor returned by this API"}
    ]


def test_a_list_page_reads_its_namespace_not_the_tasks_of_others(database, tenant_factory):
    """Pages run through an index (namespace_id, [filter,] id) (migration 000009). Without
    one the optimizer read a big namespace along the primary key, through the other
    namespaces' tasks past the cursor, or a key's tasks whole to sort them."""
    mine, theirs = tenant_factory(), tenant_factory()
    for tenant, key in ((mine, "list/k"), (theirs, "")):  # 1,000 tasks each, theirs newer
        [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
        for _ in range(10):
            items = [submit_item(queue["id"], key) for _ in range(100)]
            database.call("task_submit_many", tenant.namespace_id, "test", json.dumps(items))
    ids = [
        r["id"]
        for r in database.query(
            "SELECT id FROM tasks WHERE namespace_id = %s ORDER BY id", (mine.namespace_id,)
        )
    ]
    principal = Principal(
        0, mine.application_id, 0, mine.namespace_id, frozenset(), True, frozenset()
    )
    single = Database(database.dsn, pool_size=1)  # one connection: its handler counters
    scope = Scope(single, principal)

    def reads() -> int:
        with single.connection() as conn:
            return handler_reads(conn)

    def page(filters: dict, after: int) -> tuple[list[int], int]:
        before = reads()
        rows = scope.tasks(filters, after, 51)
        return [r["id"] for r in rows], reads() - before

    try:
        last, reads_last = page({}, ids[-6])  # the namespace's last page
        keyed, reads_keyed = page({"concurrency_key": "list/k"}, 0)
    finally:
        single.close()
    assert last == ids[-5:] and keyed == ids[:51]
    assert reads_last < 100 and reads_keyed < 100, (reads_last, reads_keyed)


def test_l1_a_list_page_reads_no_payload(client, tenant, database):
    """L1: a page answers summaries, so it reads none of its tasks' payloads, results or
    errors from the database. It read them all and dropped them: 200 tasks of 1 MiB were
    200 MiB through one server worker while the tenants it served waited."""
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    big = json.dumps({"blob": "x" * 200_000})
    items = [submit_item(queue["id"], payload=big) for _ in range(5)]
    database.call("task_submit_many", tenant.namespace_id, "test", json.dumps(items))
    principal = Principal(
        0, tenant.application_id, 0, tenant.namespace_id, frozenset(), True, frozenset()
    )
    single = Database(database.dsn, pool_size=1)  # one connection: its bytes sent

    def sent() -> int:
        [row] = single.query("SHOW SESSION STATUS LIKE 'Bytes_sent'")
        return int(row["Value"])

    try:
        before = sent()
        rows = Scope(single, principal).tasks({"queue_id": queue["id"]}, 0, 10)
        page_bytes = sent() - before
    finally:
        single.close()
    assert len(rows) == 5
    assert page_bytes < 20_000, page_bytes  # 1 MB with the payloads
    listed = client.simulate_get(
        "/v1/tasks", params={"queue_id": tenant.queue_id}, headers=tenant.headers
    ).json["data"]["tasks"]
    assert len(listed) == 5 and all("payload" not in t for t in listed)


def test_attempts_carry_the_token_as_a_string_only_when_keyed(client, tenant):
    keyed = submit(client, tenant, None, 201, concurrency_key="obj/1").json["data"]["task_id"]
    plain = submit(client, tenant, None, 201).json["data"]["task_id"]
    session = Session(client, tenant)
    granted = {a["task"]["task_id"]: a for a in session.claim()}
    assert granted[keyed]["concurrency_token"] == "1"
    assert "concurrency_token" not in granted[plain]
    assert "concurrency_key" not in granted[plain]["task"]
    [attempt] = client.simulate_get(f"/v1/tasks/{keyed}/attempts", headers=tenant.headers).json[
        "data"
    ]
    assert attempt["concurrency_token"] == "1" and attempt["state"] == "LEASED"
    one = client.simulate_get(f"/v1/tasks/{keyed}/attempts/1", headers=tenant.headers).json["data"]
    assert one == attempt
    [plain_attempt] = client.simulate_get(
        f"/v1/tasks/{plain}/attempts", headers=tenant.headers
    ).json["data"]
    assert "concurrency_token" not in plain_attempt
    assert (
        client.simulate_get(f"/v1/tasks/{keyed}/attempts/2", headers=tenant.headers).status_code
        == 404
    )


def test_cancel_before_start_releases_the_key_and_next_token_is_larger(client, tenant):
    a = submit(client, tenant, None, 201, concurrency_key="cancel/k").json["data"]["task_id"]
    b = submit(client, tenant, None, 201, concurrency_key="cancel/k").json["data"]["task_id"]
    session = Session(client, tenant)
    [first] = session.claim()
    assert first["task"]["task_id"] == a and first["concurrency_token"] == "1"
    assert session.claim() == []  # b is parked behind the held key
    cancelled = client.simulate_post(f"/v1/tasks/{a}/cancel", headers=tenant.headers)
    assert cancelled.json["data"]["state"] == "CANCELLED"
    assert session.start(first["attempt_id"]).json["error"]["code"] == "LEASE_LOST"
    [second] = session.claim()
    assert second["task"]["task_id"] == b and second["concurrency_token"] == "2"
    session.start(second["attempt_id"])
    running = client.simulate_post(f"/v1/tasks/{b}/cancel", headers=tenant.headers)
    assert running.status_code == 409 and running.json["error"]["code"] == "STATE_CONFLICT"
    session.finish(second["attempt_id"])
    finished = client.simulate_post(f"/v1/tasks/{b}/cancel", headers=tenant.headers)
    assert finished.status_code == 409
    [attempt] = client.simulate_get(f"/v1/tasks/{a}/attempts", headers=tenant.headers).json["data"]
    assert attempt["state"] == "CANCELLED"


def test_p5_a_cancelled_task_says_why_and_others_say_nothing(client, tenant, database):
    """cancel_reason: CANCELLED_BY_USER after a cancel, a parked one's and a leased one's
    alike; null on a task that is not cancelled; and a task cancelled before the column
    existed (NULL in it) reads as cancelled by a user, the only way a task was cancelled."""
    waiting = submit(client, tenant, None, 201, concurrency_key="why/k").json["data"]
    assert waiting["cancel_reason"] is None
    parked = submit(client, tenant, None, 201, concurrency_key="why/k").json["data"]["task_id"]
    session = Session(client, tenant)
    [leased] = session.claim()
    for task_id in (parked, leased["task"]["task_id"]):
        done = client.simulate_post(f"/v1/tasks/{task_id}/cancel", headers=tenant.headers)
        assert done.json["data"]["cancel_reason"] == "CANCELLED_BY_USER"
        read = client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]
        assert (read["state"], read["cancel_reason"]) == ("CANCELLED", "CANCELLED_BY_USER")
    [row] = database.query("SELECT cancel_reason FROM tasks WHERE public_id = %s", (parked,))
    assert row["cancel_reason"] == "CANCELLED_BY_USER"
    database.query("UPDATE tasks SET cancel_reason = NULL WHERE public_id = %s", (parked,))
    read = client.simulate_get(f"/v1/tasks/{parked}", headers=tenant.headers).json["data"]
    assert read["cancel_reason"] == "CANCELLED_BY_USER"


def test_resolve_rules_and_history(client, tenant):
    task = submit(client, tenant, None, 201, concurrency_key="review/k").json["data"]["task_id"]
    early = client.simulate_post(
        f"/v1/tasks/{task}/resolve", headers=tenant.headers, json={"state": "FAILED"}
    )
    assert early.status_code == 409
    session = Session(client, tenant)
    [a] = session.claim()
    session.start(a["attempt_id"])
    session.finish(a["attempt_id"], "unknown", error={"why": "timeout talking to resource"})
    back = client.simulate_post(
        f"/v1/tasks/{task}/resolve", headers=tenant.headers, json={"state": "WAITING"}
    )
    assert back.json["data"]["state"] == "WAITING"
    [b] = session.claim()
    assert b["attempt_number"] == 2 and b["concurrency_token"] == "2"
    bad = client.simulate_post(
        f"/v1/tasks/{task}/resolve", headers=tenant.headers, json={"state": "RUNNING"}
    )
    assert bad.status_code == 400
    history = client.simulate_get(f"/v1/tasks/{task}/history", headers=tenant.headers).json["data"]
    assert [h["event"] for h in history] == [
        "SUBMITTED",
        "CLAIMED",
        "STARTED",
        "OUTCOME_UNKNOWN",
        "RESOLVED",
        "CLAIMED",
    ]
    assert [h.get("concurrency_token") for h in history] == [None, "1", "1", "1", None, "2"]
    assert all(h["actor"] for h in history)


def test_queue_settings_validation_and_pause_resume(client, tenant):
    bad = client.simulate_post(
        "/v1/queues", headers=tenant.headers, json={"name": "q", "lease_seconds": 0}
    )
    assert bad.status_code == 400 and bad.json["error"]["details"][0]["field"] == "lease_seconds"
    # A cap below the base is a cap (every delay is min(cap, base x 2^(n-1))), not an error:
    # the OpenAPI document cannot state a rule between two fields, and the server must accept
    # what the document allows.
    capped = client.simulate_post(
        "/v1/queues",
        headers=tenant.headers,
        json={"name": "capped", "retry_backoff_seconds": 10, "retry_backoff_max_seconds": 5},
    )
    assert capped.status_code == 201, capped.text
    made = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "q"})
    assert made.status_code == 201
    q = made.json["data"]
    assert (
        q["max_attempts"],
        q["lease_seconds"],
        q["retry_backoff_seconds"],
        q["retry_backoff_max_seconds"],
        q["max_concurrency"],
    ) == (3, 30, 1, 300, None)
    dup = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "q"})
    assert dup.status_code == 409
    paused = client.simulate_post(f"/v1/queues/{q['queue_id']}/pause", headers=tenant.headers)
    assert paused.json["data"]["state"] == "PAUSED"
    submit(client, tenant, None, 201, queue_id=q["queue_id"])
    session = Session(client, tenant, queue_ids=[q["queue_id"]])
    assert session.claim() == []
    client.simulate_post(f"/v1/queues/{q['queue_id']}/resume", headers=tenant.headers)
    assert len(session.claim()) == 1


def test_openapi_matches_the_routes(app, client):
    import falcon.inspect

    doc = client.simulate_get("/v1/openapi.json").json
    documented = {(m.upper(), p) for p, item in doc["paths"].items() for m in item}
    mounted = set()
    for route in falcon.inspect.inspect_routes(app):
        for method in route.methods:
            if method.internal:  # Falcon's automatic 405 responders
                continue
            # A converter ({concurrency_key:path}) is how Falcon routes the field, not its name.
            if route.path == "/ui" or route.path.startswith("/ui/"):
                continue  # the dashboard's HTML pages are not part of the API
            mounted.add((method.method, re.sub(r"{(\w+):\w+}", r"{\1}", route.path)))
    assert documented == mounted
    assert doc["openapi"].startswith("3.")
    submit_op = doc["paths"]["/v1/tasks"]["post"]
    props = submit_op["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert "concurrency_key" in props and props["priority"]["maximum"] == 9


def test_cancel_and_resolve_need_tasks_manage_and_answer_what_the_read_scope_allows(
    client, tenant, database
):
    """A submit-only credential cancels nothing (403, the task unchanged); one that may manage
    but not read tasks cancels, and its answer carries no payload."""
    task_id = submit(client, tenant, None, 201, payload={"secret": "s3"}).json["data"]["task_id"]
    submitter = limited_credential(database, tenant, "tasks:submit")
    refused = client.simulate_post(f"/v1/tasks/{task_id}/cancel", headers=submitter)
    assert refused.status_code == 403 and refused.json["error"]["code"] == "PERMISSION_DENIED"
    resolve = client.simulate_post(
        f"/v1/tasks/{task_id}/resolve", headers=submitter, json={"state": "FAILED"}
    )
    assert resolve.status_code == 403
    detail = client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]
    assert detail["state"] == "WAITING"
    manager = limited_credential(database, tenant, "tasks:manage")
    cancelled = client.simulate_post(f"/v1/tasks/{task_id}/cancel", headers=manager)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json["data"]["state"] == "CANCELLED"
    assert "payload" not in cancelled.json["data"] and "s3" not in cancelled.text
    assert (
        "payload"
        in client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]
    )


def test_v2_a_waiting_task_says_what_it_waits_for(client, tenant, database):
    """V2: a parked task names the key, its holder's task, token and since when; the holder's
    task id is hidden from a credential whose queues do not take in the holder's queue; a
    task in backoff says until when; a claimable task says nothing of either."""
    other = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "hq"})
    holder_queue = other.json["data"]["queue_id"]
    holder = submit(client, tenant, None, 201, queue_id=holder_queue, concurrency_key="why/k")
    parked = submit(client, tenant, None, 201, concurrency_key="why/k").json["data"]["task_id"]
    free = submit(client, tenant, None, 201).json["data"]["task_id"]
    detail = client.simulate_get(f"/v1/tasks/{parked}", headers=tenant.headers).json["data"]
    assert detail["waiting_for"] == {
        "concurrency_key": "why/k",
        "holder_task_id": None,  # nobody holds it yet: the holder task is the key's candidate
        "holder_token": None,
        "holder_slot": None,
        "limit": 1,
        "since": None,
    }
    session = Session(client, tenant, queue_ids=[holder_queue], capacity=1)
    [granted] = session.claim(1)
    assert granted["task"]["task_id"] == holder.json["data"]["task_id"]
    detail = client.simulate_get(f"/v1/tasks/{parked}", headers=tenant.headers).json["data"]
    waiting = detail["waiting_for"]
    assert waiting["holder_task_id"] == granted["task"]["task_id"]
    assert waiting["holder_token"] == granted["concurrency_token"] == "1"
    assert waiting["holder_slot"] == granted["concurrency_slot"] == 0
    assert waiting["since"] and waiting["concurrency_key"] == "why/k"
    limited = limited_credential(database, tenant, "tasks:read")  # the first queue only
    seen = client.simulate_get(f"/v1/tasks/{parked}", headers=limited).json["data"]["waiting_for"]
    assert seen["holder_task_id"] is None and seen["holder_token"] == "1"
    assert (
        "waiting_for"
        not in client.simulate_get(f"/v1/tasks/{free}", headers=tenant.headers).json["data"]
    )
    session.start(granted["attempt_id"])
    session.finish(granted["attempt_id"], "failed", retryable=True)
    backoff = client.simulate_get(
        f"/v1/tasks/{granted['task']['task_id']}", headers=tenant.headers
    ).json["data"]
    assert backoff["state"] == "WAITING" and backoff["waiting_until"] == backoff["available_at"]
    assert "waiting_for" not in backoff
