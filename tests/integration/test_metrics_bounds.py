"""L5: /metrics stays bounded whatever clients send, and who may read it is configurable."""

from __future__ import annotations

import pytest
from falcon import testing
from prometheus_client import CollectorRegistry

from orbit_shell.server.app import create_app
from orbit_shell.server.config import Config


def _client(orbit_dsn, database, **config) -> testing.TestClient:
    app = create_app(
        Config(dsn=orbit_dsn, **config), database=database, registry=CollectorRegistry()
    )
    return testing.TestClient(app)


# The test client's WSGI validator warns of any method it does not know: that is the point.
@pytest.mark.filterwarnings("ignore::wsgiref.validate.WSGIWarning")
def test_l5_made_up_methods_add_no_series(orbit_dsn, database):
    """300 requests with 300 invented method names: the page holds one 'other' series per
    route and status, not one per name (each name used to add 18 lines)."""
    client = _client(orbit_dsn, database)
    client.simulate_request("BREW0", "/healthz")
    client.simulate_get("/metrics")  # its own series exist from here on
    before = client.simulate_get("/metrics").text
    for i in range(1, 300):
        result = client.simulate_request(f"BREW{i}", "/healthz")
        assert result.status_code in (400, 405), result.status_code
    after = client.simulate_get("/metrics").text
    assert "BREW" not in after
    assert 'method="other"' in after
    # The same series, one more GET /metrics count and latency sample between the two reads.
    assert len(after.splitlines()) == len(before.splitlines())


def test_l5_a_metrics_token_closes_the_page(orbit_dsn, database):
    client = _client(orbit_dsn, database, metrics_token="scrape-secret")
    refused = client.simulate_get("/metrics")
    assert refused.status_code == 401 and refused.json["error"]["code"] == "UNAUTHENTICATED"
    wrong = client.simulate_get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    allowed = client.simulate_get("/metrics", headers={"Authorization": "Bearer scrape-secret"})
    assert allowed.status_code == 200 and "orbit_http_requests_total" in allowed.text
    # The scheme is case-insensitive (RFC 9110), and a bare token is no bearer header.
    lower = client.simulate_get("/metrics", headers={"Authorization": "bearer scrape-secret"})
    assert lower.status_code == 200
    bare = client.simulate_get("/metrics", headers={"Authorization": "scrape-secret"})
    assert bare.status_code == 401
    # Open by default: no token configured, no header needed.
    assert _client(orbit_dsn, database).simulate_get("/metrics").status_code == 200
