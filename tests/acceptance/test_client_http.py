"""The API client SDK (W6) over real HTTP: how it treats the environment it runs in."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

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
    direct.close()  # closes its connections; the client stays usable
    assert isinstance(direct.list_queues(), list)


class _Envelope(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"data": [], "request_id": "r"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_trusts_the_ca_bundle_the_environment_names_and_nothing_else(tmp_path, monkeypatch):
    # Over HTTPS the client verifies the server: with REQUESTS_CA_BUNDLE naming the bundle
    # that signed the server's certificate the call goes through; with the system's store
    # only, the same self-signed server is refused before anything is sent.
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = HTTPServer(("127.0.0.1", 0), _Envelope)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    for name in ("HTTPS_PROXY", "https_proxy", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    try:
        with pytest.raises(UnavailableError):
            Client(url, "orb_token", retries=0).list_queues()
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
        assert Client(url, "orb_token").list_queues() == []
    finally:
        server.shutdown()
        server.server_close()


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
