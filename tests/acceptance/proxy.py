"""A reverse proxy in front of the test's `orbit` server, over real HTTP, that fails the
requests a test picks the way nginx or a load balancer does: a `502 Bad Gateway` page without
reaching Orbit (``"before"``), or a `504 Gateway Timeout` page after Orbit has answered, its
answer dropped (``"after"``). Every other request is passed through as it came."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3

PAGES = {
    "before": (502, b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"),
    "after": (504, b"<html><head><title>504 Gateway Time-out</title></head></html>"),
}
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


class FailingProxy:
    """``fail(method, path)`` says how to fail one request: ``"before"``, ``"after"`` or None
    (pass it through). ``failed`` lists the requests it failed, as (method, path, how)."""

    def __init__(self, upstream: str, fail: Callable[[str, str], str | None]) -> None:
        self.failed: list[tuple[str, str, str]] = []
        pool = urllib3.PoolManager(maxsize=16)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's pool expects

            def log_message(self, *args) -> None:  # quiet: the test reads ``failed``
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                how = fail(self.command, self.path)
                if how != "before":
                    answer = pool.request(
                        self.command,
                        upstream + self.path,
                        body=body,
                        headers={
                            k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS
                        },
                        retries=False,
                        redirect=False,
                        timeout=urllib3.Timeout(connect=5, read=60),
                    )
                if how is None:
                    status, data = answer.status, answer.data
                    kind = answer.headers.get("Content-Type", "application/json")
                else:
                    proxy.failed.append((self.command, self.path, how))
                    (status, data), kind = PAGES[how], "text/html"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FailingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
