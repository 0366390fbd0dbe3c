"""API fuzzing: schemathesis generates requests from /v1/openapi.json and runs them in process
against the Falcon app and a real MariaDB. No generated input may produce a 5xx, responses
must match the document, a request the document calls valid must not be refused as invalid
(positive data acceptance: the document says what the server enforces), and one tenant's new
ids are 404 to another tenant. Path ids are real ones (a task, its attempt, a worker session, a key,
a schedule, the queue), so the id routes are exercised past their 404."""

from __future__ import annotations

import pytest
import schemathesis
from falcon import testing
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
)

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from tests.conftest import make_tenant
from tests.helpers import Session, task_body

ID_FIELDS = {
    "/v1/tasks": ("task_id", "/v1/tasks/{}"),
    "/v1/queues": ("queue_id", "/v1/queues/{}"),
    "/v1/schedules": ("schedule_id", "/v1/schedules/{}"),
}


@pytest.fixture(scope="session")
def tenants(database, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    return make_tenant(database, tmp), make_tenant(database, tmp)


@pytest.fixture(scope="session")
def real_ids(tenants, database, orbit_dsn):
    """Ids of real objects of the owner: a waiting task, a leased attempt of another, a
    worker session, a schedule, a key policy and the queue; path parameters are replaced by
    these."""
    owner, _ = tenants
    client = testing.TestClient(create_app(Config(dsn=orbit_dsn), database=database))
    for i in range(2):  # one to lease, one left waiting
        client.simulate_post(
            "/v1/tasks",
            headers={**owner.headers, "Idempotency-Key": f"real-{i}"},
            json=task_body(owner.queue_id),
        )
    client.simulate_post(
        "/v1/tasks",
        headers={**owner.headers, "Idempotency-Key": "real-keyed"},
        json=task_body(owner.queue_id, concurrency_key="real/key"),
    )
    session = Session(client, owner, capacity=1)
    [leased] = session.claim(1)
    schedule = client.simulate_post(
        "/v1/schedules",
        headers=owner.headers,
        json={
            "name": "real",
            "rule": {"interval_seconds": 3600},
            "definition": {"task": task_body(owner.queue_id)},
        },
    ).json["data"]["schedule_id"]
    policy = client.simulate_post(
        "/v1/key-policies", headers=owner.headers, json={"prefix": "real/", "limit": 2}
    ).json["data"]["policy_id"]
    return {
        "task_id": leased["task"]["task_id"],
        "number": "1",
        "attempt_id": leased["attempt_id"],
        "session_id": session.id,
        "schedule_id": schedule,
        "queue_id": owner.queue_id,
        "concurrency_key": "real/key",
        "policy_id": policy,
    }


class AppProxy:
    """The WSGI app schemathesis calls; the fixture below points it at the real app.

    (schemathesis' lazy fixture loader relies on pytest internals that pytest 9 changed, so the
    schema is loaded at import, from an app whose database is never touched by that route.)
    """

    def __init__(self) -> None:
        self.target = create_app(Config(dsn="mysql://schema-only@127.0.0.1:1/none"))

    def __call__(self, environ, start_response):
        return self.target(environ, start_response)


PROXY = AppProxy()
schema = schemathesis.openapi.from_wsgi("/v1/openapi.json", PROXY)


@pytest.fixture
def real_app(app):
    PROXY.target = app
    return app


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_no_5xx_and_no_cross_tenant_reads(case, tenants, real_app, real_ids):
    owner, stranger = tenants
    app = real_app
    if case.path_parameters:
        case.path_parameters = {name: real_ids[name] for name in case.path_parameters}
    wait = case.body.get("wait_ms") if isinstance(case.body, dict) else None
    if case.path.endswith("/claim") and type(wait) is int and wait > 20:
        # A real session makes a generated long poll wait for real, up to 30 s an example.
        case.body["wait_ms"] = 20
    rule = case.body.get("rule") if isinstance(case.body, dict) else None
    if isinstance(rule, dict) and isinstance(rule.get("timezone"), str):
        # The document describes a zone by its form and says in words that the server checks
        # it against its zone database (an enum of every name broke client generators); a
        # generated name of that form is most likely no zone at all.
        rule["timezone"] = "Europe/Berlin"
    response = case.call_and_validate(
        headers=owner.headers,
        checks=[
            not_a_server_error,
            response_schema_conformance,
            content_type_conformance,
            positive_data_acceptance,
        ],
    )
    if case.method == "POST" and case.path in ID_FIELDS and response.status_code in (200, 201):
        field, template = ID_FIELDS[case.path]
        new_id = response.json()["data"][field]
        other = testing.TestClient(app).simulate_get(
            template.format(new_id), headers=stranger.headers
        )
        assert other.status_code == 404, other.text
