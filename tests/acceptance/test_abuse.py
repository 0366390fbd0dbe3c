"""L1 and the server's own error pages, probed as an outside client would, on loopback.

The starvation test holds one credential's 500 long polls and 100 slow-sending connections
against a real `orbit` (4 gevent workers) while another tenant makes ordinary requests, and
prints that tenant's latency beside an idle server's (the figure L1 is about); the payload
test does the same while one tenant claims, resumes and lists tasks of 1 MiB. It asserts
what must hold whatever the machine's speed: every ordinary request is answered, the poll
bounds answer 429 with Retry-After, and slow senders are cut off. Bounded in count and time.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import statistics
import threading
import time
import urllib.request

import pytest

from tests.acceptance.conftest import launch_orbit, stop_orbit
from tests.conftest import make_tenant


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _open(url: str, head: bytes, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", _port(url)), timeout=5)
    sock.sendall(head + body)
    return sock


def _request(method: str, path: str, token: str | None, body: dict | None = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", "Host: orbit"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def _status(sock: socket.socket, wait: float) -> tuple[int | None, bytes]:
    """The status code and the whole response read within ``wait`` seconds; (None, b"")
    when nothing came, (0, b"") when the server closed the connection without answering."""
    sock.settimeout(wait)
    data = b""
    try:
        while True:
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = [
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                if length and len(body) >= length[0]:
                    break
            more = sock.recv(65536)
            if not more:
                break
            data += more
    except TimeoutError:
        if not data:
            return None, b""
    except ConnectionResetError:
        pass
    if not data:
        return 0, b""
    return int(data.split(b" ", 2)[1]), data


def _answered(socks: list[socket.socket], quiet: float = 2.0) -> list[tuple[int, bytes]]:
    """The responses that arrive on ``socks`` until none has come for ``quiet`` seconds
    after the first one (which may take a loaded server a while; at most 15 s in all, well
    inside the polls' 30 s wait): the rest are held by the server."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    answers: list[tuple[int, bytes]] = []
    began = last = time.monotonic()
    while (
        selector.get_map()
        and time.monotonic() - began < 15
        and (not answers or time.monotonic() - last < quiet)
    ):
        for key, _ in selector.select(timeout=0.1):
            answers.append(_status(key.fileobj, 2.0))
            selector.unregister(key.fileobj)
            last = time.monotonic()
    selector.close()
    return answers


def _get(url: str, path: str, token: str, timeout: float = 10.0) -> float:
    """One ordinary request on a new connection; its seconds. Fails on any non-200."""
    started = time.perf_counter()
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        response.read()
    return time.perf_counter() - started


def _latencies(url: str, path: str, token: str, n: int) -> list[float]:
    return [_get(url, path, token) for _ in range(n)]


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def _hello(url: str, token: str, queue_id: str, n: int) -> list[str]:
    sessions = []
    for i in range(n):
        request = urllib.request.Request(
            url + "/v1/workers/hello",
            data=json.dumps(
                {"worker_id": f"poller-{i}", "queue_ids": [queue_id], "capacity": 1}
            ).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            sessions.append(json.loads(response.read())["data"]["session_id"])
    return sessions


def _claims(url: str, token: str, sessions: list[str], n: int) -> list[socket.socket]:
    return [
        _open(
            url,
            _request(
                "POST",
                f"/v1/workers/{sessions[i % len(sessions)]}/claim",
                token,
                {"max": 1, "wait_ms": 30000},
            ),
        )
        for i in range(n)
    ]


class Dribbler(threading.Thread):
    """Slow senders: half send a header line a second, half a body byte a second."""

    def __init__(self, url: str, token: str, n: int) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.headers = [
            _open(url, b"POST /v1/tasks HTTP/1.1\r\nHost: orbit\r\n") for _ in range(n // 2)
        ]
        head = _request("POST", "/v1/queues", token, {"name": "x" * 20})
        self.bodies = [_open(url, head[:-15]) for _ in range(n - n // 2)]  # 15 bytes short

    def run(self) -> None:
        while not self.stop.wait(1.0):
            for socks, chunk in ((self.headers, b"X-Slow: 1\r\n"), (self.bodies, b" ")):
                for sock in socks:
                    try:
                        sock.sendall(chunk)
                    except OSError:
                        pass  # cut off by the server: what the test looks for

    def close(self) -> None:
        self.stop.set()
        self.join()
        for sock in self.headers + self.bodies:
            sock.close()


def test_l1_one_credential_s_polls_and_slow_senders_leave_another_tenant_served(
    orbit_dsn, database, tmp_path
):
    """L1: while tenant A holds 500 long polls and 100 slow-sending connections, tenant B's
    ordinary reads are all answered (printed: B's p99 beside the idle server's). A's polls
    beyond the per-credential bound are 429 with Retry-After, and A's slow senders are cut
    off: headers after the header timeout, bodies with a 408 after the body timeout."""
    proc = launch_orbit(
        orbit_dsn,
        tmp_path / "server.log",
        ORBIT_HTTP_WORKERS="4",
        ORBIT_HEADER_TIMEOUT="3",
        ORBIT_BODY_TIMEOUT="4",
    )
    a, b = make_tenant(database, tmp_path), make_tenant(database, tmp_path)
    url, path = proc.url, f"/v1/queues/{b.queue_id}"
    polls: list[socket.socket] = []
    dribbler = None
    try:
        _latencies(url, path, b.token, 20)  # warm every worker's connections
        idle = _latencies(url, path, b.token, 200)
        sessions = _hello(url, a.token, a.queue_id, 50)
        started = time.monotonic()
        polls = _claims(url, a.token, sessions, 500)
        dribbler = Dribbler(url, a.token, 100)
        dribbler.start()
        answers = _answered(polls)
        refused = [data for code, data in answers if code == 429]
        held = len(polls) - len(answers)
        attacked = _latencies(url, path, b.token, 200)
        time.sleep(max(0.0, started + 6.0 - time.monotonic()))  # past both timeouts
        header_answers = [_status(sock, 2.0)[0] for sock in dribbler.headers]
        body_answers = [_status(sock, 2.0) for sock in dribbler.bodies]
    finally:
        if dribbler:
            dribbler.close()
        for sock in polls:
            sock.close()
        stop_orbit(proc)
    idle_p99, attacked_p99 = _p(idle, 99), _p(attacked, 99)
    print(
        f"\nL1 starvation: tenant B GET p50/p99 idle {_p(idle, 50):.2f}/{idle_p99:.2f} ms, "
        f"under attack {_p(attacked, 50):.2f}/{attacked_p99:.2f} ms "
        f"(p99 {attacked_p99 / idle_p99:.2f}x); tenant A: 500 polls, {held} held, "
        f"{len(refused)} refused 429; 100 slow senders: header senders cut off "
        f"{header_answers.count(0)}/50, body senders answered 408 "
        f"{sum(1 for c, _ in body_answers if c == 408)}/50"
    )
    assert held <= 256  # ORBIT_LONGPOLL_PER_CREDENTIAL's default, for the whole server
    assert len(refused) + held == 500
    assert all(b"retry-after: 1\r\n" in data.lower() for data in refused)
    assert all(b'"QUOTA_EXCEEDED"' in data for data in refused)
    assert header_answers == [0] * 50  # closed by the server, no request ever made of them
    for code, data in body_answers:
        assert code == 408 and b'"REQUEST_TIMEOUT"' in data, data


def _post(url: str, path: str, token: str, body: dict, **headers: str) -> dict:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


class Reader(threading.Thread):
    """Another tenant's ordinary reads, one after another, for as long as it runs."""

    def __init__(self, url: str, path: str, token: str) -> None:
        super().__init__(daemon=True)
        self.args, self.stop, self.seconds = (url, path, token), threading.Event(), []

    def run(self) -> None:
        while not self.stop.is_set():
            self.seconds.append(_get(*self.args))

    def during(self, action):
        """``action()``'s answer, with this reader running from before it to after it."""
        self.start()
        time.sleep(0.1)
        try:
            return action()
        finally:
            time.sleep(0.1)
            self.stop.set()
            self.join()


def test_l1_one_tenant_s_large_payloads_leave_another_tenant_served(orbit_dsn, database, tmp_path):
    """L1: one server process builds each answer whole while the other requests it serves
    wait, so no answer carries more task payload than a request body may (1 MiB, or one larger
    task). Tenant A has 20 tasks of about 1 MiB; on a server of one process, A's claim of all
    of them, hello after it and a page of its tasks each carry at most 1 MiB of payload, while
    tenant B reads. Printed: B's latency idle and during each. Before the budget the claim
    answered 20 MiB and so did hello, each holding B's reads for 120-130 ms; after it, 10-13."""
    proc = launch_orbit(orbit_dsn, tmp_path / "server.log", ORBIT_HTTP_WORKERS="1")
    a, b = make_tenant(database, tmp_path), make_tenant(database, tmp_path)
    url, path = proc.url, f"/v1/queues/{b.queue_id}"
    blob = {"blob": "x" * 1_000_000}
    lines = []
    try:
        for i in range(20):
            task = {"queue_id": a.queue_id, "handler": "h", "handler_version": "v1"}
            task.update(payload_version="v1", payload=blob)
            _post(url, "/v1/tasks", a.token, task, **{"Idempotency-Key": f"big-{i}"})
        idle = _latencies(url, path, b.token, 50)
        lines.append(f"idle {_p(idle, 50):.1f}/{max(idle) * 1000:.1f}")
        hello = {"worker_id": "big", "queue_ids": [a.queue_id], "capacity": 50}
        session = _post(url, "/v1/workers/hello", a.token, hello)["session_id"]

        def claim():
            return _post(url, f"/v1/workers/{session}/claim", a.token, {"max": 20})

        answers = {}
        for name, action in (
            ("claim of 20", claim),
            ("another claim", claim),
            ("hello again", lambda: _post(url, "/v1/workers/hello", a.token, hello)),
            ("task list page of 100", lambda: _get_json(url, "/v1/tasks?limit=100", a.token)),
        ):
            reader = Reader(url, path, b.token)
            answers[name] = reader.during(action)
            lines.append(f"{name} {_p(reader.seconds, 50):.1f}/{max(reader.seconds) * 1000:.1f}")
    finally:
        stop_orbit(proc)
    print("\nL1 large payloads: tenant B GET p50/max ms, " + "; ".join(lines))
    for name in ("claim of 20", "another claim"):
        [granted] = answers[name]["assignments"]  # each of about 1 MiB: one a claim
        assert len(json.dumps(granted["task"]["payload"])) > 1_000_000
    page = answers["hello again"]
    assert len(page["in_flight"]) == 1 and page["in_flight_after"] is not None
    listed = answers["task list page of 100"]["tasks"]
    assert len(listed) == 20 and all("payload" not in t for t in listed)


def _get_json(url: str, path: str, token: str) -> dict:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["data"]


def test_l1_an_abandoned_long_poll_ends_and_frees_its_place(orbit_dsn, database, tmp_path):
    """L1: a poll whose client went away stops at its next probe pause, so its place under
    the credential's bound is free again at once, not after its 30 s wait."""
    proc = launch_orbit(
        orbit_dsn,
        tmp_path / "server.log",
        ORBIT_HTTP_WORKERS="1",
        ORBIT_LONGPOLL_PER_CREDENTIAL="4",
    )
    a = make_tenant(database, tmp_path)
    try:
        sessions = _hello(proc.url, a.token, a.queue_id, 4)
        first = _claims(proc.url, a.token, sessions, 4)
        assert [_status(sock, 0.5)[0] for sock in first] == [None] * 4  # all four held
        [extra] = _claims(proc.url, a.token, sessions, 1)
        assert _status(extra, 5.0)[0] == 429
        extra.close()
        for sock in first:
            sock.close()
        deadline = time.monotonic() + 3
        while True:
            with urllib.request.urlopen(proc.url + "/metrics", timeout=5) as response:
                page = response.read().decode()
            if "orbit_longpolls_open 0.0" in page or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert "orbit_longpolls_open 0.0" in page
        again = _claims(proc.url, a.token, sessions, 4)
        assert [_status(sock, 0.5)[0] for sock in again] == [None] * 4
        for sock in again:
            sock.close()
    finally:
        stop_orbit(proc)


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10240 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n", 400),
        (b"GET /healthz HTTP/9.9\r\n\r\n", 400),
    ],
)
def test_gunicorn_s_own_error_pages_are_json_envelopes(orbit_server, raw, status):
    """SPEC 2: every error is JSON in the envelope, those gunicorn answers before the app
    too (they were HTML pages)."""
    sock = _open(orbit_server, raw)
    try:
        code, data = _status(sock, 5.0)
    finally:
        sock.close()
    assert code == status, data
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    parsed = json.loads(body)
    assert set(parsed) == {"error", "request_id"} and parsed["error"]["code"] == "INVALID_ARGUMENT"


def _chunked(
    path: str, token: str | None, body: bytes, *headers: str, media: str = "application/json"
) -> bytes:
    """A POST whose body is sent in three chunks, without Content-Length (HTTP/1.1)."""
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: orbit",
        *([f"Authorization: Bearer {token}"] if token else []),
        f"Content-Type: {media}",
        "Transfer-Encoding: chunked",
        *headers,
    ]
    size = max(1, -(-len(body) // 3))
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


def _answer(url: str, raw: bytes) -> tuple[int | None, dict]:
    sock = _open(url, raw)
    try:
        code, data = _status(sock, 10.0)
    finally:
        sock.close()
    return code, json.loads(data.partition(b"\r\n\r\n")[2] or b"{}")


def test_a_chunked_body_is_read_like_any_other(orbit_server, database, tmp_path):
    """HTTP/1.1 lets a client send a body in chunks, without Content-Length. Such a body was
    read as empty: a submission was refused for a missing queue_id, and a queue was created
    without the settings its body named. Over the size limit it is 413, as with a length."""
    t = make_tenant(database, tmp_path)
    task = {
        "queue_id": t.queue_id,
        "handler": "h",
        "handler_version": "v1",
        "payload_version": "v1",
        "payload": {"n": 7, "text": "chunks"},
    }
    code, body = _answer(
        orbit_server,
        _chunked("/v1/tasks", t.token, json.dumps(task).encode(), "Idempotency-Key: chunked-1"),
    )
    assert code == 201, body
    assert body["data"]["payload"] == task["payload"]
    code, body = _answer(
        orbit_server,
        _chunked("/v1/queues", t.token, b'{"name": "chunky", "lease_seconds": 77}'),
    )
    assert code == 201, body
    assert (body["data"]["name"], body["data"]["lease_seconds"]) == ("chunky", 77)
    big = json.dumps({**task, "payload": "x" * (2 * 1024 * 1024)}).encode()
    code, body = _answer(
        orbit_server, _chunked("/v1/tasks", t.token, big, "Idempotency-Key: chunked-2")
    )
    assert (code, body["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (t.namespace_id,)
    ) == [{"n": 1}]


@pytest.mark.parametrize(
    "chunks",
    [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n", b"5\r\n{}"],
    ids=["size-not-hex", "no-terminator", "cut-short"],
)
def test_a_malformed_chunked_body_is_400_in_the_envelope(orbit_server, database, tmp_path, chunks):
    """A chunk size line "zz" answered 500 with a traceback in the log."""
    t = make_tenant(database, tmp_path)
    head = _chunked("/v1/queues", t.token, b"").split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    sock = _open(orbit_server, head + chunks)
    if chunks.endswith(b"{}"):
        sock.shutdown(socket.SHUT_WR)  # the client goes before its body is whole
    try:
        code, data = _status(sock, 10.0)
    finally:
        sock.close()
    body = json.loads(data.partition(b"\r\n\r\n")[2])
    assert code == 400 and body["error"]["code"] == "INVALID_ARGUMENT", data
    assert database.query(
        "SELECT COUNT(*) AS n FROM queues WHERE namespace_id = %s", (t.namespace_id,)
    ) == [{"n": 1}]


def test_a_chunked_form_is_read_like_any_other(orbit_server, database, tmp_path):
    """The dashboard's forms are read as the API's bodies are: a sign-in sent in chunks was
    read as empty and answered 401 for a good token."""
    t = make_tenant(database, tmp_path)
    media = "application/x-www-form-urlencoded"
    form = f"token={t.token}".encode()
    sock = _open(orbit_server, _chunked("/ui/login", None, form, media=media))
    try:
        code, data = _status(sock, 10.0)
    finally:
        sock.close()
    head = data.partition(b"\r\n\r\n")[0].decode().lower()
    assert code == 303 and "location: /ui/" in head and "set-cookie: orbit_session=" in head, data
    big = _chunked("/ui/login", None, b"token=" + b"x" * 20_000, media=media)
    sock = _open(orbit_server, big)
    try:
        code, data = _status(sock, 10.0)
    finally:
        sock.close()
    assert code == 413 and b"set-cookie" not in data.lower(), data


def test_two_servers_on_one_host_share_no_control_socket(orbit_dsn, tmp_path):
    """Two `orbit` servers of one user: stopping one leaves the other whole (gunicorn's
    control socket, one path per user, was taken over by the second and removed by
    whichever stopped first; Orbit runs without it)."""
    runtime = tmp_path / "run"
    runtime.mkdir()
    first = launch_orbit(orbit_dsn, tmp_path / "one.log", XDG_RUNTIME_DIR=str(runtime))
    second = launch_orbit(orbit_dsn, tmp_path / "two.log", XDG_RUNTIME_DIR=str(runtime))
    try:
        assert os.listdir(runtime) == []
        stop_orbit(first)
        with urllib.request.urlopen(second.url + "/readyz", timeout=5) as response:
            assert response.status == 200
    finally:
        stop_orbit(first)
        stop_orbit(second)
