"""How the API client (W6) reads an answer that is not Orbit's envelope: what a gateway in front
of Orbit answers when Orbit restarts, is unreachable or is slow."""

from __future__ import annotations

import pytest

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import ApiError, LeaseLostError, UnavailableError

PAGE = b"<html><head><title>Bad Gateway</title></head><body>nginx</body></html>"


@pytest.mark.parametrize("status", [502, 503, 504])
@pytest.mark.parametrize("raw", [PAGE, b'{"message": "Bad Gateway"}', b""])
def test_a_gateways_error_answer_is_orbit_unavailable(status, raw):
    with pytest.raises(UnavailableError) as caught:
        Client._decode(status, raw)
    assert caught.value.code == "UNAVAILABLE" and caught.value.status == status


@pytest.mark.parametrize(
    "status, raw", [(500, PAGE), (200, b"[1, 2]"), (200, b"7"), (200, b'{"error": "x"}')]
)
def test_any_other_answer_that_is_not_an_envelope_is_internal(status, raw):
    with pytest.raises(ApiError) as caught:
        Client._decode(status, raw)
    assert type(caught.value) is ApiError and caught.value.code == "INTERNAL"
    assert "not an Orbit response" in caught.value.message


def test_orbits_own_envelopes_are_read_as_before():
    assert Client._decode(200, b'{"data": {"a": 1}, "request_id": "r"}') == {"a": 1}
    with pytest.raises(LeaseLostError):
        Client._decode(409, b'{"error": {"code": "LEASE_LOST", "message": "m", "details": []}}')
