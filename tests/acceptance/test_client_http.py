"""The API client SDK (W6) over real HTTP: how it treats the environment it runs in."""

from __future__ import annotations

import pytest

from devtools.localdb import free_port
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import UnavailableError


def test_a_netrc_entry_for_the_host_does_not_replace_the_bearer_token(
    orbit_server, tenant, tmp_path, monkeypatch
):
    # HTTP libraries that read ~/.netrc (requests does) apply its credentials as Basic auth
    # and replace the token's header: every call would be 401.
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login someone password secret\n")
    (tmp_path / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    client = Client(orbit_server, tenant.token)
    queue = client.create_queue("netrc-q")
    assert client.get_queue(queue.queue_id).name == "netrc-q"


def test_proxy_variables_are_honoured_as_read_when_the_client_is_made(
    orbit_server, tenant, monkeypatch
):
    # The environment is read once, at construction: a proxy named then is used (here one
    # that does not listen, so the call cannot get through), and NO_PROXY exempts the host.
    dead = f"http://127.0.0.1:{free_port()}"
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", dead)
    proxied = Client(orbit_server, tenant.token, retries=0)
    with pytest.raises(UnavailableError):
        proxied.list_queues()

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    direct = Client(orbit_server, tenant.token)
    assert isinstance(direct.list_queues(), list)
