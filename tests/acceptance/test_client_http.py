"""The API client SDK (W6) over real HTTP: how it treats the environment it runs in."""

from __future__ import annotations

import threading

import pytest

from devtools.localdb import free_port
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import InvalidArgumentError, SubmitTaskRequest, UnavailableError


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


def test_one_client_shared_by_threads_keeps_each_answer_with_its_request(orbit_server, tenant):
    # W6: the client is shared by a worker's threads and by submitters'. Each of 8 threads
    # submits its own tasks through one Client with a pool smaller than the thread count;
    # every answer must be its own request's task (an answer read from another thread's
    # connection would carry another payload), and a replay returns the same task.
    client = Client(orbit_server, tenant.token, pool_size=3)
    errors: list[BaseException] = []
    seen: dict[str, str] = {}

    def submit(thread: int) -> None:
        try:
            for n in range(25):
                key = f"shared-{thread}-{n}"
                request = SubmitTaskRequest(tenant.queue_id, "h", "v1", "v1", {"key": key})
                made = client.submit_task(key, request)
                assert made.created and made.task.payload == {"key": key}
                again = client.submit_task(key, request)
                assert not again.created and again.task.task_id == made.task.task_id
                seen[key] = made.task.task_id
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(seen) == 200 and len(set(seen.values())) == 200


def test_a_key_http_would_change_is_refused_before_sending(orbit_server, tenant, database):
    """HTTP drops a header value's spaces at either end: "k1 " would reach the server as
    "k1" and replay or conflict with that key's task. The client refuses it itself, with the
    error the server gives a batch item so named."""
    client = Client(orbit_server, tenant.token)
    request = SubmitTaskRequest(tenant.queue_id, "h", "v1", "v1", {"n": 1})
    first = client.submit_task("k1", request)
    with pytest.raises(InvalidArgumentError) as refused:
        client.submit_task("k1 ", SubmitTaskRequest(tenant.queue_id, "h", "v1", "v1", {"n": 2}))
    assert refused.value.details == [
        {"field": "Idempotency-Key", "message": "must not start or end with a space"}
    ]
    [row] = database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (tenant.namespace_id,)
    )
    assert row["n"] == 1 and first.created
