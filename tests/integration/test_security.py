"""Security checks not covered elsewhere: the per-credential submission guard,
limits on page size and body, and tokens never stored raw."""

from __future__ import annotations

import json

from falcon import testing

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from orbit_shell.server.guard import SubmitGuard
from tests.helpers import Session, limited_credential, submit


def test_submission_guard_answers_429_with_retry_after(orbit_dsn, database, tenant_factory):
    client = testing.TestClient(
        create_app(Config(dsn=orbit_dsn, submit_rate=1, submit_burst=3), database=database)
    )
    a, b = tenant_factory(), tenant_factory()
    for _ in range(3):
        submit(client, a, None, 201)
    limited = submit(client, a, None, 429)
    assert limited.json["error"]["code"] == "QUOTA_EXCEEDED"
    assert int(limited.headers["Retry-After"]) >= 1
    submit(client, b, None, 201)  # another credential is not affected


def test_guard_refills_over_time():
    now = [0.0]
    guard = SubmitGuard(rate=2, burst=1, clock=lambda: now[0])
    guard.take(1)
    try:
        guard.take(1)
        raise AssertionError("second take should have been refused")
    except Exception as exc:  # noqa: BLE001 - checking the type below
        assert getattr(exc, "code", None) == "QUOTA_EXCEEDED"
    now[0] += 0.5
    guard.take(1)


def test_no_raw_token_anywhere_in_the_database(database, tenant):
    for table in ("credentials", "task_history", "applications", "orbit_meta"):
        rows = database.query(f"SELECT * FROM {table}")
        assert tenant.token not in json.dumps(rows, default=str), table


def _questions(database) -> int:
    [row] = database.query("SHOW GLOBAL STATUS LIKE 'Questions'")
    return int(row["Value"])


def test_a_submission_is_one_database_round_trip_and_revocation_holds(
    client, tenant, database, tmp_path
):
    """POST /v1/tasks authenticates in the call that submits (task_submit_as): one statement
    from the server per submission, and a credential revoked before it is refused at once."""
    submit(client, tenant, None, 201)  # a warm connection
    # The counter is the server's: another client's statement can only add to it, so the
    # least of three tries is what one submission sends.
    sent = []
    for _ in range(3):
        before = _questions(database)
        submit(client, tenant, None, 201)
        sent.append(_questions(database) - before)
    assert min(sent) == 2, sent  # the CALL, and the status read itself
    database.call("credential_revoke", tenant.token.split("_")[1])
    refused = submit(client, tenant, None, 401)
    assert refused.json["error"]["code"] == "UNAUTHENTICATED"
    assert refused.headers["WWW-Authenticate"] == "Bearer"


def test_a_submission_reads_its_credential_and_queue_together_and_checks_both(
    client, tenant, database
):
    """task_submit_as reads the credential with its queue in one statement and makes the
    checks the worker routines' credential read makes: an unknown credential and a wrong
    secret are 401, a credential without tasks:submit is 403 (also naming a queue that does
    not exist: who may submit before what was named), an unknown queue is 404, and none of
    them writes a task."""
    wrong = "orb_" + tenant.token.split("_")[1] + "_" + "A" * 43
    unknown = "orb_" + "0" * 16 + "_" + "A" * 43
    worker_only = limited_credential(database, tenant, "workers:consume")
    cases = (
        ({"Authorization": f"Bearer {wrong}"}, tenant.queue_id, 401, "UNAUTHENTICATED"),
        ({"Authorization": f"Bearer {unknown}"}, tenant.queue_id, 401, "UNAUTHENTICATED"),
        (worker_only, tenant.queue_id, 403, "PERMISSION_DENIED"),
        (worker_only, "f" * 32, 403, "PERMISSION_DENIED"),
        (tenant.headers, "f" * 32, 404, "NOT_FOUND"),
    )
    for headers, queue, status, code in cases:
        refused = client.simulate_post(
            "/v1/tasks",
            json={
                "queue_id": queue,
                "handler": "h",
                "handler_version": "v1",
                "payload_version": "v1",
                "payload": {},
            },
            headers={**headers, "Idempotency-Key": "checked"},
        )
        assert (refused.status_code, refused.json["error"]["code"]) == (status, code), refused.text
    [row] = database.query(
        "SELECT COUNT(*) AS n FROM idempotency_records WHERE idempotency_key = 'checked'"
    )
    assert row["n"] == 0


def _least_sent(database, make_call, tries: int = 3) -> int:
    """Statements the server received for one ``make_call()`` (each must answer 200): the
    least of ``tries``, since another client's statement can only add to the counter."""
    sent = []
    for _ in range(tries):
        before = _questions(database)
        answer = make_call()
        assert answer.status_code == 200, answer.text
        sent.append(_questions(database) - before)
    return min(sent)


def test_worker_calls_after_hello_are_one_round_trip_each_and_revocation_holds(
    client, tenant, database
):
    """A claim that finds work, a start and a report of a batch, and a report-and-claim each
    authenticate in the routine that acts (the ``*_as`` routines): one statement from the
    server each, and a credential revoked before them is refused at once on every route."""
    session = Session(client, tenant, capacity=10)
    for _ in range(6):
        submit(client, tenant, None, 201)
    held: list[str] = []

    def post(path: str, body: dict):
        return client.simulate_post(path, headers=tenant.headers, json=body)

    def claim_one():
        answer = post(f"/v1/workers/{session.id}/claim", {"max": 1})
        held.extend(a["attempt_id"] for a in answer.json["data"]["assignments"])
        return answer

    def start_one():
        return post("/v1/attempts/start", {"session_id": session.id, "attempt_ids": [held[0]]})

    def report_one():
        done = held.pop(0)
        return post(
            "/v1/attempts/result",
            {"session_id": session.id, "results": [{"attempt_id": done, "outcome": "succeeded"}]},
        )

    def report_and_claim_one():
        post("/v1/attempts/start", {"session_id": session.id, "attempt_ids": [held[0]]})
        done = held.pop(0)
        answer = post(
            f"/v1/workers/{session.id}/report-and-claim",
            {"results": [{"attempt_id": done, "outcome": "succeeded"}], "max": 1},
        )
        assert answer.json["data"]["results"][0]["status"] == 200, answer.text
        held.extend(a["attempt_id"] for a in answer.json["data"]["assignments"])
        return answer

    claim_one()  # a warm connection
    assert _least_sent(database, claim_one) == 2  # the CALL, and the status read itself
    assert len(held) == 4
    # One start per try: each starts the attempt that the next report reports.
    starts, reports = [], []
    for _ in range(3):
        before = _questions(database)
        assert start_one().status_code == 200
        starts.append(_questions(database) - before)
        before = _questions(database)
        assert report_one().status_code == 200
        reports.append(_questions(database) - before)
    assert min(starts) == 2 and min(reports) == 2, (starts, reports)
    # A report-and-claim (with the start before it, a call of its own): two CALLs.
    assert _least_sent(database, report_and_claim_one, tries=2) == 3
    assert held, "each report-and-claim claimed the next task"

    database.call("credential_revoke", tenant.token.split("_")[1])
    for path, body in (
        (f"/v1/workers/{session.id}/claim", {"max": 1}),
        ("/v1/attempts/start", {"session_id": session.id, "attempt_ids": held}),
        (
            "/v1/attempts/result",
            {
                "session_id": session.id,
                "results": [{"attempt_id": held[0], "outcome": "succeeded"}],
            },
        ),
        (
            f"/v1/workers/{session.id}/report-and-claim",
            {"results": [{"attempt_id": held[0], "outcome": "succeeded"}], "max": 1},
        ),
    ):
        refused = post(path, body)
        assert refused.status_code == 401, (path, refused.text)
        assert refused.json["error"]["code"] == "UNAUTHENTICATED"
        assert refused.headers["WWW-Authenticate"] == "Bearer"
    [row] = database.query("SELECT state FROM attempts WHERE public_id = %s", (held[0],))
    assert row["state"] == "LEASED", "a refused call changed nothing"


def test_a_single_start_and_renew_are_one_round_trip_each_and_revocation_holds(
    client, tenant, database
):
    """POST /v1/attempts/{id}/start and /renew (the SDK worker renews every attempt it holds)
    authenticate in the routine that acts: one statement from the server each; a revoked
    credential is refused at once and the lease is not extended."""
    session = Session(client, tenant, capacity=4)
    for _ in range(3):
        submit(client, tenant, None, 201)
    held = [a["attempt_id"] for a in session.claim(max=3)]
    assert len(held) == 3
    left = list(held)
    assert _least_sent(database, lambda: session.start(left.pop())) == 2
    assert _least_sent(database, lambda: session.call(held[0], "renew")) == 2
    [before] = database.query(
        "SELECT lease_expires_at FROM attempts WHERE public_id = %s", (held[0],)
    )
    database.call("credential_revoke", tenant.token.split("_")[1])
    for action in ("renew", "start"):
        refused = session.call(held[0], action)
        assert refused.status_code == 401, (action, refused.text)
        assert refused.json["error"]["code"] == "UNAUTHENTICATED"
    [after] = database.query(
        "SELECT lease_expires_at FROM attempts WHERE public_id = %s", (held[0],)
    )
    assert after == before


def test_self_authenticating_worker_routes_answer_who_before_what(client, tenant, database):
    """On the worker routes that authenticate in their routine, a bad token is 401 before a
    malformed path id (404) or body (400), and a credential without workers:consume is 403
    before its body is looked at, as on every other route (the credential is read first on
    those paths only)."""
    session = Session(client, tenant)
    bad = {"Authorization": "Bearer orb_" + "0" * 16 + "_" + "A" * 43}
    routes = (
        (f"/v1/workers/{session.id}/claim", {"max": 1}),
        ("/v1/workers/" + "z" * 32 + "/claim", {"max": 1}),
        (f"/v1/workers/{session.id}/claim", {"max": 0}),
        (f"/v1/workers/{session.id}/report-and-claim", {"results": [], "max": 1}),
        ("/v1/workers/nothex/report-and-claim", {"results": [], "max": 1}),
        ("/v1/attempts/start", {"session_id": session.id, "attempt_ids": []}),
        ("/v1/attempts/result", {"session_id": "x", "results": []}),
        ("/v1/attempts/" + "0" * 32 + "/renew", {"session_id": session.id}),
        ("/v1/attempts/" + "0" * 32 + "/start", {}),
        ("/v1/attempts/nothex/start", {"session_id": session.id}),
    )
    for path, body in routes:
        answer = client.simulate_post(path, headers=bad, json=body)
        assert answer.status_code == 401, (path, answer.text)
    submitter = limited_credential(database, tenant, "tasks:submit")
    for path, body in routes:
        if "nothex" in path or "z" * 32 in path:
            continue  # a path id that cannot exist is a 404 once the caller is known
        answer = client.simulate_post(path, headers=submitter, json=body)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json["error"]["code"] == "PERMISSION_DENIED"
    answer = client.simulate_post(
        "/v1/workers/nothex/claim", headers=tenant.headers, json={"max": 1}
    )
    assert answer.status_code == 404, answer.text
    answer = client.simulate_post(
        f"/v1/workers/{session.id}/claim", headers=tenant.headers, json={"max": 0}
    )
    assert answer.status_code == 400, answer.text
