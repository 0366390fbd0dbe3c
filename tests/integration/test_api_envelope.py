"""SPEC 2 envelope, errors and auth: every error is JSON in the envelope, scopes are enforced,
other namespaces are 404."""

from __future__ import annotations

import argparse
import json

import pytest
from falcon import testing

from orbit_shell.cli.admin import bootstrap
from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from orbit_shell.validation import MAX_JSON_DEPTH
from tests.helpers import Session, limited_credential, submit, task_body


def _assert_error(result, status, code):
    assert result.status_code == status, result.text
    body = result.json
    assert set(body) == {"error", "request_id"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], list)
    assert result.headers["X-Request-Id"] == body["request_id"]
    assert "Traceback" not in result.text


def test_success_envelope_and_request_id(client, tenant):
    result = client.simulate_get("/v1/queues", headers={**tenant.headers, "X-Request-Id": "abc-1"})
    assert result.status_code == 200
    assert result.json["request_id"] == "abc-1"
    assert [q["queue_id"] for q in result.json["data"]] == [tenant.queue_id]


@pytest.mark.parametrize("path", ["/nope", "/v1/tasks/x/y/z", "/v1"])
def test_unknown_routes_are_404_envelopes(client, path):
    _assert_error(client.simulate_get(path), 404, "NOT_FOUND")


@pytest.mark.parametrize("method", ["DELETE", "TRACE", "PUT"])
def test_an_undeclared_method_is_405_with_allow(client, tenant, method):
    """A known path with a method it does not have: 405 naming the methods it has (it was a
    404 with a "405" message)."""
    result = client.simulate_request(method, "/v1/queues", headers=tenant.headers)
    _assert_error(result, 405, "METHOD_NOT_ALLOWED")
    assert set(result.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}


def test_bad_json_oversized_and_wrong_media_type(client, tenant):
    h = {**tenant.headers, "Idempotency-Key": "k1", "Content-Type": "application/json"}
    _assert_error(
        client.simulate_post("/v1/tasks", body="{not json", headers=h), 400, "INVALID_ARGUMENT"
    )
    _assert_error(
        client.simulate_post("/v1/tasks", body=b"\xff\xfe", headers=h), 400, "INVALID_ARGUMENT"
    )
    _assert_error(client.simulate_post("/v1/tasks", body="[1]", headers=h), 400, "INVALID_ARGUMENT")
    big = json.dumps({"payload": "x" * (1024 * 1024)})
    _assert_error(client.simulate_post("/v1/tasks", body=big, headers=h), 413, "PAYLOAD_TOO_LARGE")
    _assert_error(
        client.simulate_post("/v1/tasks", body="{}", headers={**h, "Content-Type": "text/plain"}),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [31, 980, 5000])
def test_l2_json_nested_too_deep_is_400_on_every_json_route_and_stores_nothing(
    client, tenant, database, depth
):
    """L2: the nesting limit is checked at the door. A payload nested 980 deep was accepted
    and then made every claim that included it fail after its commit; 985 or more was a 500
    on any JSON route (the parser's recursion)."""
    h = {
        **tenant.headers,
        "Idempotency-Key": f"deep-{depth}",
        "Content-Type": "application/json",
    }
    deep_text = "[" * depth + '"leaf"' + "]" * depth  # json.dumps itself would recurse
    body = json.dumps(task_body(tenant.queue_id, payload="PAYLOAD")).replace('"PAYLOAD"', deep_text)
    _assert_error(client.simulate_post("/v1/tasks", body=body, headers=h), 400, "INVALID_ARGUMENT")
    deep = '{"name": ' + deep_text + "}"
    for path in ("/v1/queues", "/v1/workers/hello", "/v1/tasks/batch", "/v1/schedules"):
        _assert_error(client.simulate_post(path, body=deep, headers=h), 400, "INVALID_ARGUMENT")
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (tenant.namespace_id,)
    ) == [{"n": 0}]


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_l2_nan_and_infinities_are_400_on_every_route_that_stores_json_and_change_nothing(
    client, tenant, database, word
):
    """L2: NaN, Infinity and -Infinity are not JSON (RFC 8259). Python's parser took them: a
    payload carrying one was stored and answered as sent, and the task's detail, any list
    holding it and its assignment were then JSON no strict client parses."""
    h = {**tenant.headers, "Idempotency-Key": f"nan-{word}", "Content-Type": "application/json"}

    def refused(path: str, body: str) -> None:
        result = client.simulate_post(path, body=body.replace('"WORD"', word), headers=h)
        _assert_error(result, 400, "INVALID_ARGUMENT")
        assert f"{word} is not a JSON number" in result.json["error"]["message"]

    task = task_body(tenant.queue_id, payload={"ratio": "WORD"})
    rule = {"interval_seconds": 60}
    refused("/v1/tasks", json.dumps(task))
    refused("/v1/tasks/batch", json.dumps({"tasks": [{"idempotency_key": "b", **task}]}))
    refused("/v1/schedules", json.dumps({"name": "s", "rule": rule, "definition": {"task": task}}))
    assert database.query(
        "SELECT (SELECT COUNT(*) FROM tasks WHERE namespace_id = %s)"
        " + (SELECT COUNT(*) FROM schedules WHERE namespace_id = %s) AS n",
        (tenant.namespace_id, tenant.namespace_id),
    ) == [{"n": 0}]
    submit(client, tenant, None, 201)
    session = Session(client, tenant, capacity=1)
    [assignment] = session.claim(1)
    attempt = assignment["attempt_id"]
    assert session.start(attempt).status_code == 200
    refused(
        f"/v1/attempts/{attempt}/result",
        json.dumps({"session_id": session.id, "outcome": "succeeded", "result": "WORD"}),
    )
    item = {"attempt_id": attempt, "outcome": "succeeded", "result": "WORD"}
    refused(f"/v1/workers/{session.id}/report-and-claim", json.dumps({"max": 0, "results": [item]}))
    [row] = database.query(
        "SELECT a.state, a.result FROM attempts a WHERE a.public_id = %s", (attempt,)
    )
    assert row == {"state": "RUNNING", "result": None}
    assert session.finish(attempt, result={"ratio": 0.5}).status_code == 200


def test_l2_the_deepest_accepted_payload_reaches_a_worker_and_back(client, tenant):
    """At the limit (30 levels in the body) a payload is stored, claimed in a batch, started
    and reported with a result as deep, through every route a worker uses."""
    payload = _nested(MAX_JSON_DEPTH - 1)  # the body's object is the 30th level
    submit(client, tenant, None, 201, payload=payload)
    batch_payload = _nested(MAX_JSON_DEPTH - 3)  # body, tasks list, item
    batch = client.simulate_post(
        "/v1/tasks/batch",
        headers=tenant.headers,
        json={
            "tasks": [
                {"idempotency_key": "b-1", **task_body(tenant.queue_id, payload=batch_payload)}
            ]
        },
    )
    assert batch.json["data"]["results"][0]["status"] == 201, batch.text
    session = Session(client, tenant, capacity=2)
    assignments = session.claim(2)
    assert sorted(json.dumps(a["task"]["payload"]) for a in assignments) == sorted(
        [json.dumps(payload), json.dumps(batch_payload)]
    )
    ids = [a["attempt_id"] for a in assignments]
    started = client.simulate_post(
        "/v1/attempts/start",
        headers=tenant.headers,
        json={"session_id": session.id, "attempt_ids": ids, "brief": True},
    )
    assert [r["status"] for r in started.json["data"]["results"]] == [200, 200]
    report = client.simulate_post(
        f"/v1/workers/{session.id}/report-and-claim",
        headers=tenant.headers,
        json={
            "max": 0,
            "results": [
                {"attempt_id": i, "outcome": "succeeded", "result": _nested(MAX_JSON_DEPTH - 4)}
                for i in ids
            ],
        },
    )
    assert [r["status"] for r in report.json["data"]["results"]] == [200, 200], report.text


def test_l3_a_row_that_cannot_be_answered_does_not_strand_the_rest_of_its_claim(
    client, tenant, orbit_dsn, database, caplog
):
    """L3: a claim commits before its answer is made. A payload stored before the door's
    nesting limit (written here straight to the table) cannot be made into an answer; it is
    left out and logged, and every other task of the same claim still reaches the worker
    (they were leased and never delivered, claim after claim)."""
    poisoned = submit(client, tenant, None, 201).json["data"]["task_id"]
    healthy = [submit(client, tenant, None, 201).json["data"]["task_id"] for _ in range(2)]
    conn = db.connect(orbit_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE tasks SET payload = %s WHERE public_id = %s",
                ("[" * 3000 + "]" * 3000, poisoned),
            )
    finally:
        conn.close()
    session = Session(client, tenant, capacity=3)
    claimed = session.claim(3)
    assert sorted(a["task"]["task_id"] for a in claimed) == sorted(healthy)
    assert "assignment left out of an answer" in caplog.text
    # The left-out attempt stays leased to the session; it expires unstarted (L3 bounds
    # how often: test_l3_a_task_never_started_fails_after_max_attempts_dispatches...).
    [row] = database.query("SELECT state FROM tasks WHERE public_id = %s", (poisoned,))
    assert row["state"] == "LEASED"


def test_unknown_fields_are_rejected_with_details(client, tenant):
    result = client.simulate_post(
        "/v1/queues", json={"name": "q2", "colour": "red"}, headers=tenant.headers
    )
    _assert_error(result, 400, "INVALID_ARGUMENT")
    assert result.json["error"]["details"] == [{"field": "colour", "message": "unknown field"}]


@pytest.mark.parametrize(
    "header",
    [None, "Basic abc", "Bearer ", "Bearer orb_0000000000000000_" + "A" * 43, "Bearer not-a-token"],
)
def test_bad_credentials_are_401(client, header):
    headers = {"Authorization": header} if header else {}
    _assert_error(client.simulate_get("/v1/queues", headers=headers), 401, "UNAUTHENTICATED")


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_the_bearer_scheme_is_case_insensitive(client, tenant, scheme):
    """RFC 9110 11.1: an authentication scheme's name is case-insensitive; some clients
    write "bearer", and they were refused with 401."""
    token = tenant.headers["Authorization"].split(" ", 1)[1]
    result = client.simulate_get("/v1/queues", headers={"Authorization": f"{scheme} {token}"})
    assert result.status_code == 200, result.text


def test_wrong_secret_for_a_real_credential_is_401(client, tenant):
    token = tenant.token[:-4] + ("AAAA" if not tenant.token.endswith("AAAA") else "BBBB")
    _assert_error(
        client.simulate_get("/v1/queues", headers={"Authorization": f"Bearer {token}"}),
        401,
        "UNAUTHENTICATED",
    )


def test_revoked_credential_is_401(client, tenant, orbit_dsn):
    from orbit_shell.engine import db

    conn = db.connect(orbit_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE credentials SET revoked_at = UTC_TIMESTAMP(6) WHERE public_id = %s",
                (tenant.token.split("_")[1],),
            )
    finally:
        conn.close()
    _assert_error(client.simulate_get("/v1/queues", headers=tenant.headers), 401, "UNAUTHENTICATED")


def test_missing_scope_is_403(client, tenant_factory):
    producer = tenant_factory(worker_access=False)
    result = client.simulate_post(
        "/v1/workers/hello",
        headers=producer.headers,
        json={"worker_id": "w", "queue_ids": [producer.queue_id], "capacity": 1},
    )
    _assert_error(result, 403, "PERMISSION_DENIED")


def test_other_namespace_is_404_never_403(client, tenant_factory):
    a, b = tenant_factory(), tenant_factory()
    _assert_error(
        client.simulate_get(f"/v1/queues/{b.queue_id}", headers=a.headers), 404, "NOT_FOUND"
    )
    submit = {
        "queue_id": b.queue_id,
        "handler": "h",
        "handler_version": "v1",
        "payload_version": "v1",
        "payload": {},
    }
    _assert_error(
        client.simulate_post(
            "/v1/tasks", json=submit, headers={**a.headers, "Idempotency-Key": "x"}
        ),
        404,
        "NOT_FOUND",
    )
    created = client.simulate_post(
        "/v1/tasks", json=submit, headers={**b.headers, "Idempotency-Key": "x"}
    )
    assert created.status_code == 201
    task_id = created.json["data"]["task_id"]
    for path in (
        f"/v1/tasks/{task_id}",
        f"/v1/tasks/{task_id}/attempts",
        f"/v1/tasks/{task_id}/attempts/1",
        f"/v1/tasks/{task_id}/history",
    ):
        _assert_error(client.simulate_get(path, headers=a.headers), 404, "NOT_FOUND")
    _assert_error(
        client.simulate_post(f"/v1/tasks/{task_id}/cancel", headers=a.headers), 404, "NOT_FOUND"
    )
    assert client.simulate_get("/v1/tasks", headers=a.headers).json["data"]["tasks"] == []


def test_queue_scope_limits_a_credential(client, tenant, database, tmp_path):
    other = client.simulate_post("/v1/queues", json={"name": "second"}, headers=tenant.headers)
    assert other.status_code == 201
    second = other.json["data"]["queue_id"]
    # A credential of the same namespace limited to the first queue.
    limited = limited_credential(database, tenant, "tasks:read,queues:manage")
    assert client.simulate_get(f"/v1/queues/{tenant.queue_id}", headers=limited).status_code == 200
    _assert_error(client.simulate_get(f"/v1/queues/{second}", headers=limited), 404, "NOT_FOUND")
    assert [
        q["queue_id"] for q in client.simulate_get("/v1/queues", headers=limited).json["data"]
    ] == [tenant.queue_id]


def test_health_ready_metrics(client):
    assert client.simulate_get("/healthz").json["data"] == {"status": "ok"}
    assert client.simulate_get("/readyz").json["data"] == {"status": "ready"}
    client.simulate_get("/healthz")
    metrics = client.simulate_get("/metrics")
    assert metrics.status_code == 200
    assert 'orbit_http_requests_total{method="GET",route="/healthz",status="200"}' in metrics.text


def test_database_down_is_503(tmp_path):
    dead = "mysql://root@127.0.0.1:1/nothing"
    client = testing.TestClient(create_app(Config(dsn=dead), database=Database(dead)))
    _assert_error(
        client.simulate_get(
            "/v1/queues", headers={"Authorization": "Bearer orb_0123456789abcdef_" + "A" * 43}
        ),
        503,
        "UNAVAILABLE",
    )
    _assert_error(client.simulate_get("/readyz"), 503, "UNAVAILABLE")


def test_readyz_is_503_when_schema_is_behind(fresh_dsn):
    client = testing.TestClient(create_app(Config(dsn=fresh_dsn), database=Database(fresh_dsn)))
    result = client.simulate_get("/readyz")
    _assert_error(result, 503, "UNAVAILABLE")
    assert "orbit-migrate" in result.json["error"]["message"]


def test_bootstrap_is_idempotent_for_the_same_names(database, tmp_path):
    args = argparse.Namespace(
        application="idem-app",
        environment="e",
        namespace="n",
        queue="q",
        worker_access=False,
        output=str(tmp_path / "a.json"),
    )
    first = bootstrap(database, args)
    args.output = str(tmp_path / "b.json")
    second = bootstrap(database, args)
    assert first["queue_id"] == second["queue_id"]


@pytest.mark.parametrize("name", [" q", "q ", "q\u00a0", "\u2003q"])
def test_names_with_whitespace_at_an_end_are_400_and_change_nothing(client, tenant, database, name):
    """The database's collations pad with spaces: "q " would be the taken name "q", and a
    worker identity "w1 " would resume "w1"'s session. Refused like a key with them (K2)."""
    before = database.query(
        "SELECT (SELECT COUNT(*) FROM queues) AS q, (SELECT COUNT(*) FROM schedules) AS s,"
        " (SELECT COUNT(*) FROM worker_sessions) AS w"
    )
    queue = client.simulate_post("/v1/queues", json={"name": name}, headers=tenant.headers)
    schedule = client.simulate_post(
        "/v1/schedules",
        json={
            "name": name,
            "rule": {"interval_seconds": 60},
            "definition": {"task": task_body(tenant.queue_id)},
        },
        headers=tenant.headers,
    )
    hello = client.simulate_post(
        "/v1/workers/hello",
        json={"worker_id": name, "queue_ids": [tenant.queue_id], "capacity": 1},
        headers=tenant.headers,
    )
    for result, field in ((queue, "name"), (schedule, "name"), (hello, "worker_id")):
        _assert_error(result, 400, "INVALID_ARGUMENT")
        assert result.json["error"]["details"] == [
            {"field": field, "message": "must not start or end with whitespace"}
        ]
    assert (
        database.query(
            "SELECT (SELECT COUNT(*) FROM queues) AS q, (SELECT COUNT(*) FROM schedules) AS s,"
            " (SELECT COUNT(*) FROM worker_sessions) AS w"
        )
        == before
    )
    # The same names inside are names like any other.
    made = client.simulate_post("/v1/queues", json={"name": "q q"}, headers=tenant.headers)
    assert made.status_code == 201
