"""Dashboard sign-in (V3) in-process: a signed, expiring session per sign-in that never holds
the API token and ends with its credential, a CSRF token per session, failed sign-ins logged
and limited per address, the public origin forms must come from (behind a proxy that
rewrites Host too), and the headers every answer carries. The browser tests drive the same
pages in Chromium."""

from __future__ import annotations

import logging
import re
import time

import pytest
from falcon import testing

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config
from tests.helpers import limited_credential

FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def make_client(orbit_dsn, database):
    return lambda **settings: testing.TestClient(
        create_app(Config(dsn=orbit_dsn, **settings), database=database)
    )


def _sign_in(client, token: str, **request):
    return client.simulate_post(
        "/ui/login", body=f"token={token}", headers={"Content-Type": FORM}, **request
    )


def _session(result) -> str:
    return result.cookies["orbit_session"].value


def _csrf(client, cookie: str) -> str:
    page = client.simulate_get("/ui/queues", cookies={"orbit_session": cookie})
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text).group(1)


def test_v3_a_session_is_signed_per_sign_in_and_never_holds_the_token(make_client, tenant):
    client = make_client()
    first, second = _sign_in(client, tenant.token), _sign_in(client, tenant.token)
    assert first.status_code == second.status_code == 303
    one, two = _session(first), _session(second)
    assert tenant.token not in one and tenant.token.split("_", 2)[2] not in one
    assert one != two and _csrf(client, one) != _csrf(client, two)
    assert first.cookies["orbit_session"].http_only
    assert first.cookies["orbit_session"].max_age == 12 * 3600
    public_id, issued, nonce, mac = one.split(".")
    for forged in (
        f"{public_id}.{issued}.{nonce}.{'0' * 64}",
        f"{public_id}.{int(issued) + 1}.{nonce}.{mac}",
        f"{'f' * 16}.{issued}.{nonce}.{mac}",
        tenant.token,  # the old cookie held the token itself
    ):
        page = client.simulate_get("/ui/", cookies={"orbit_session": forged})
        assert page.status_code == 303 and page.headers["location"] == "/ui/login", forged

    def pause(csrf: str) -> int:
        return client.simulate_post(
            f"/ui/queues/{tenant.queue_id}/pause",
            body=f"csrf={csrf}",
            headers={"Content-Type": FORM},
            cookies={"orbit_session": one},
        ).status_code

    assert pause(_csrf(client, two)) == 403  # another session's token
    assert pause(_csrf(client, one)) == 303


def test_v3_a_session_expires_and_ends_with_its_credential(
    make_client, tenant, database, orbit_dsn, monkeypatch
):
    short = make_client(session_seconds=1)
    cookie = _session(_sign_in(short, tenant.token))
    assert short.simulate_get("/ui/", cookies={"orbit_session": cookie}).status_code == 200
    time.sleep(2.2)
    assert short.simulate_get("/ui/", cookies={"orbit_session": cookie}).status_code == 303
    client = make_client()
    reader = limited_credential(database, tenant, "tasks:read")["Authorization"][7:]
    cookie = _session(_sign_in(client, reader))
    assert client.simulate_get("/ui/", cookies={"orbit_session": cookie}).status_code == 200
    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)
    _revoke(reader)
    assert client.simulate_get("/ui/", cookies={"orbit_session": cookie}).status_code == 303


def _revoke(token: str) -> None:
    """``orbit-admin revoke``, as an operator runs it (ORBIT_MYSQL_DSN set by the test)."""
    from orbit_shell.cli.admin import main as admin

    assert admin(["revoke", "--credential-id", token.split("_")[1]]) == 0


def test_v3_failed_sign_ins_are_logged_and_limited_per_address(make_client, tenant, caplog):
    client = make_client()
    caplog.set_level(logging.WARNING, logger="orbit.ui")
    for _ in range(10):
        bad = _sign_in(client, "orb_0000000000000000_" + "x" * 43, remote_addr="10.9.8.7")
        assert bad.status_code == 401
    blocked = _sign_in(client, tenant.token, remote_addr="10.9.8.7")
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
    assert "orbit_session" not in blocked.cookies
    assert _sign_in(client, tenant.token, remote_addr="10.9.8.8").status_code == 303
    refused = [r for r in caplog.records if getattr(r, "action", "") == "ui.sign_in_refused"]
    assert len(refused) == 10 and refused[0].client == "10.9.8.7"


@pytest.mark.parametrize(
    ("settings", "request_", "accepted"),
    [
        # A proxy that rewrote Host: only the configured public origin tells.
        ({}, {"host": "orbit-internal", "headers": {"Origin": "https://orbit.example"}}, False),
        (
            {"public_url": "https://orbit.example"},
            {"host": "orbit-internal", "headers": {"Origin": "https://orbit.example"}},
            True,
        ),
        (
            {"public_url": "https://orbit.example"},
            {"host": "orbit-internal", "headers": {"Origin": "http://orbit.example"}},
            False,
        ),
        # The scheme counts: http://h is not https://h.
        ({}, {"host": "orbit.example", "headers": {"Origin": "https://orbit.example"}}, False),
        ({}, {"host": "orbit.example", "headers": {"Origin": "http://orbit.example"}}, True),
        (
            {"trust_forwarded": 1},
            {
                "host": "orbit-internal",
                "headers": {
                    "Origin": "https://orbit.example",
                    "X-Forwarded-Proto": "https",
                    "X-Forwarded-Host": "orbit.example",
                },
            },
            True,
        ),
        (
            {},
            {
                "host": "orbit-internal",
                "headers": {
                    "Origin": "https://orbit.example",
                    "X-Forwarded-Proto": "https",
                    "X-Forwarded-Host": "orbit.example",
                },
            },
            False,
        ),
    ],
)
def test_v3_forms_must_come_from_the_public_origin(
    make_client, tenant, settings, request_, accepted
):
    client = make_client(**settings)
    headers = {"Content-Type": FORM, **request_["headers"]}
    answer = client.simulate_post(
        "/ui/login", body=f"token={tenant.token}", headers=headers, host=request_["host"]
    )
    assert answer.status_code == (303 if accepted else 403), answer.text
    if accepted and settings.get("public_url", "").startswith("https"):
        assert answer.cookies["orbit_session"].secure


def test_every_answer_says_nosniff_and_keeps_its_address_to_itself(make_client, tenant):
    client = make_client()
    for answer in (
        client.simulate_get("/v1/queues", headers=tenant.headers),
        client.simulate_get("/ui/login"),
        client.simulate_get("/nowhere"),
    ):
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"


class _Broken:
    """A resource whose handler fails as a bug would: the error boundary's subject."""

    auth_exempt = True

    def on_get(self, req, resp):
        raise RuntimeError("a bug")


def test_v3_an_unexpected_error_under_ui_is_a_500_page_and_json_elsewhere(
    orbit_dsn, database, caplog
):
    """A JSON body set on an HTML response could not be serialised: Falcon answered such
    errors as an empty 415."""
    app = create_app(Config(dsn=orbit_dsn), database=database)
    app.add_route("/ui/broken", _Broken())
    app.add_route("/v1/broken", _Broken())
    client = testing.TestClient(app)
    caplog.set_level(logging.ERROR, logger="orbit.api")
    page = client.simulate_get("/ui/broken")
    assert page.status_code == 500 and page.headers["content-type"].startswith("text/html")
    assert "content-security-policy" in page.headers and "INTERNAL" in page.text
    assert "a bug" not in page.text
    api = client.simulate_get("/v1/broken")
    assert api.status_code == 500 and api.json["error"]["code"] == "INTERNAL"
    assert len([r for r in caplog.records if r.getMessage() == "unhandled error"]) == 2
