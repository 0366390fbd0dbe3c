"""A database server that stops answering (H3, L1): a primary that accepts connections but
never answers used to hang every request (no answer in 100 s) and /readyz with it, and a
listed host that accepts TCP and never speaks added seconds to every discovery. Here the
server lists such a host beside a relay to the real database; the relay is then frozen."""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest

from tests.acceptance.conftest import launch_orbit, stop_orbit
from tests.acceptance.tcpproxy import FreezingRelay, SilentHost
from tests.helpers import task_body


def _call(url: str, tenant=None, body=None, timeout: float = 20.0):
    """(status, headers, JSON body) of one request; ``timeout`` only catches a hang."""
    headers = {"Content-Type": "application/json"}
    if tenant is not None:
        headers.update(tenant.headers, **{"Idempotency-Key": secrets.token_hex(8)})
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.headers, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


@pytest.fixture
def tcp_account(server, orbit_dsn):
    """An account that reaches the test database over TCP (its root signs in by socket)."""
    name = urlparse(orbit_dsn).path.strip("/")
    password = secrets.token_hex(8)
    with server.root() as conn, conn.cursor() as cur:
        cur.execute("CREATE OR REPLACE USER 'orbit_tcp'@'localhost' IDENTIFIED BY %s", (password,))
        cur.execute(f"GRANT ALL ON `{name}`.* TO 'orbit_tcp'@'localhost'")
    yield f"orbit_tcp:{password}", name
    with server.root() as conn, conn.cursor() as cur:
        cur.execute("DROP USER 'orbit_tcp'@'localhost'")


def test_h3_a_silent_database_is_503_with_retry_after_and_readyz_never_hangs(
    server, tcp_account, tenant, tmp_path
):
    account, name = tcp_account
    with SilentHost() as silent, FreezingRelay(("127.0.0.1", server.port)) as relay:
        dsn = f"mysql://{account}@127.0.0.1:{silent.port},127.0.0.1:{relay.port}/{name}"
        proc = launch_orbit(
            dsn,
            tmp_path / "orbit.log",
            ORBIT_DB_TIMEOUT="2",
            ORBIT_SWEEP_INTERVAL="0",
            ORBIT_SCHEDULE_INTERVAL="0",
        )
        try:
            assert _call(proc.url + "/readyz", timeout=5)[0] == 200
            submit = proc.url + "/v1/tasks"
            assert _call(submit, tenant, task_body(tenant.queue_id))[0] == 201
            relay.frozen.set()
            status, headers, answer = _call(submit, tenant, task_body(tenant.queue_id))
            assert status == 503 and answer["error"]["code"] == "UNAVAILABLE", answer
            assert int(headers["Retry-After"]) >= 1
            status, headers, answer = _call(proc.url + "/readyz", timeout=5)
            assert status == 503 and headers["Retry-After"], answer
            # The frozen host is forgotten: the next request looks again, and is refused
            # for want of a writable server rather than left waiting on the old connection.
            status, headers, answer = _call(proc.url + "/v1/queues", tenant)
            assert status == 503 and headers["Retry-After"], answer
            relay.frozen.clear()
            deadline = time.monotonic() + 20
            while (status := _call(submit, tenant, task_body(tenant.queue_id))[0]) != 201:
                assert status == 503 and time.monotonic() < deadline, status
                time.sleep(0.5)
            assert _call(proc.url + "/readyz", timeout=5)[0] == 200
        finally:
            stop_orbit(proc)
