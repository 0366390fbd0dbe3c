"""The gunicorn worker ``orbit`` serves with: gevent, with Orbit's bounds on slow clients.

Why gevent (L1). Under threaded workers every long-poll claim and every slow client held one
of a fixed set of request threads (32 on a default server), so one credential's 200 idle
polls, or 40 sockets sending a byte a second, left no thread for anyone else. Here a
connection is a greenlet: waiting on a socket or on a poll's pause costs no thread, so
ordinary requests never queue behind them. What is left to bound is bounded explicitly:

- the headers of a request must arrive within ``header_timeout`` seconds (gunicorn's
  keepalive timeout wraps the header parse of every request, the first one included);
- its body within ``body_timeout`` (``read_json`` reads under the deadline this worker puts
  in the WSGI environ, and answers 408 past it);
- long polls per credential and per server (``longpoll.PollGate``), and each poll ends when
  its client has gone (``api.workers.peer_gone``);
- database connections per process (``Database(max_open=...)``), so many requests at once
  wait for a connection instead of exhausting the server's.

Errors gunicorn answers itself (a header over the size limit, a NUL in a header, a broken
request line) come back in Orbit's JSON envelope, not as gunicorn's HTML page.
"""

from __future__ import annotations

import json
import uuid

import gevent
from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker

from orbit_shell import errors
from orbit_shell.server.common import BODY_DEADLINE

# Statuses gunicorn answers by itself, and the envelope code of each.
GUNICORN_CODES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    414: "INVALID_ARGUMENT",
    417: "INVALID_ARGUMENT",
    431: "INVALID_ARGUMENT",
    501: "INVALID_ARGUMENT",
}


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's ``util.write_error``, answering in Orbit's envelope instead of HTML."""
    code = GUNICORN_CODES.get(status_int, "INTERNAL")
    message = f"{reason}: {mesg}"[:300] if mesg else reason
    body = json.dumps(
        {
            "error": {"code": code, "message": message, "details": []},
            "request_id": uuid.uuid4().hex,
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    util.write_nonblock(sock, head + body)


class OrbitWorker(GeventWorker):
    """``GeventWorker`` with the body deadline in every request's environ and JSON error
    pages. The header deadline is gunicorn's keepalive setting, which ``orbit`` sets to
    ``Config.header_timeout``."""

    def init_process(self) -> None:
        # The one place gunicorn writes an error page (Worker.handle_error) calls this.
        util.write_error = write_json_error
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app, seconds = self.wsgi, self.app.config.body_timeout

        def deadline() -> gevent.Timeout:
            return gevent.Timeout(
                seconds, errors.RequestTimeout(f"the request body took over {seconds:g} s")
            )

        def with_deadline(environ, start_response):
            environ[BODY_DEADLINE] = deadline
            return app(environ, start_response)

        self.wsgi = with_deadline
