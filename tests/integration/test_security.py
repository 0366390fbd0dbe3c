"""Security checks not covered elsewhere: the per-credential submission guard,
limits on page size and body, and tokens never stored raw."""

from __future__ import annotations

import json

from falcon import testing

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from orbit_shell.server.guard import SubmitGuard
from tests.helpers import submit


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
