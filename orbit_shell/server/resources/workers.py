"""Worker sessions: hello, claim (bounded long poll), report-and-claim, goodbye (W1, W2, W7)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import falcon

from orbit_shell import jsontext, validation, worker_shapes
from orbit_shell.engine import batches, longpoll, serialize
from orbit_shell.engine.db import peer_closed
from orbit_shell.server.common import (
    as_caller,
    in_scope_results,
    item,
    ok,
    ok_text,
    own_body,
    read_json,
    scope,
)
from orbit_shell.server.wakeups import Wakeups

# The public ids of a waiting session's queues, which its poll listens on for wakeups.
SESSION_QUEUES = (
    "SELECT q.public_id FROM worker_sessions s "
    "JOIN worker_session_queues wq ON wq.session_id = s.id JOIN queues q ON q.id = wq.queue_id "
    "WHERE s.public_id = %s AND s.namespace_id = %s"
)


def peer_gone(sock: socket.socket | None) -> Callable[[], bool] | None:
    """A check that the client at the other end of ``sock`` has gone; None where the server
    gives no socket (an app called in-process)."""
    return None if sock is None else lambda: peer_closed(sock)


class Workers:
    def __init__(
        self,
        max_body: int,
        gate: longpoll.PollGate,
        wakeups: Wakeups | None = None,
        sleep=None,
        clock=time.monotonic,
    ) -> None:
        self.max_body = max_body
        self.gate = gate
        self.wakeups = wakeups or Wakeups()
        self.sleep = sleep or time.sleep  # looked up now: gevent may have patched it
        self.clock = clock

    def on_post_hello(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "workers:connect")
        body = read_json(req, worker_shapes.WORKER_HELLO, self.max_body)
        queue_ids = sorted({s.queue(q)["public_id"] for q in body["queue_ids"]})
        registration = jsontext.fingerprint({"queues": queue_ids, "capacity": body["capacity"]})
        session, in_flight = s.db.call(
            "worker_hello",
            s.namespace_id,
            s.principal.application_id,
            body["worker_id"],
            body["capacity"],
            int(body["concurrency_keys"]),
            json.dumps(queue_ids),
            registration,
            body["in_flight_after"],
        )
        row = session[0]
        # in_flight is one page (L1: its payloads within the body's bound); in_flight_after,
        # when set, is what a hello again sends for the next.
        head = json.dumps(
            {
                "session_id": row["session_id"],
                "lease_seconds": row["lease_seconds"],
                "capacity": row["capacity"],
                "concurrency_keys": bool(row["concurrency_keys"]),
                "in_flight_after": row["in_flight_after"],
            }
        )
        ok_text(req, resp, f'{head[:-1]}, "in_flight": {serialize.assignments_json(in_flight)}}}')

    # Claims and report-and-claim authenticate in their database call (the ``*_as``
    # routines): one round trip where reading the credential first made two.
    self_authenticating = (
        ("POST", "/v1/workers/{session_id}/claim"),
        ("POST", "/v1/workers/{session_id}/report-and-claim"),
    )

    def on_post_claim(self, req: falcon.Request, resp: falcon.Response, session_id: str) -> None:
        """A claim at once (worker_claim_as); only a claim that found nothing and may wait
        reads the credential, for the long poll's bounds and its probes."""
        body = own_body(req, worker_shapes.WORKER_CLAIM, self.max_body, "workers:consume")

        def claim(caller: batches.Caller) -> list:
            return batches.call_as(
                req.context.db, "worker_claim", caller, session_id, body["max"], int(body["start"])
            )[0]

        def scoped(s) -> list:
            s.check_session_queues(session_id)
            return claim(s.namespace_id)

        rows = as_caller(req, "workers:consume", claim, scoped)
        if not rows and body["wait_ms"] > 0:
            # A long poll: bounded per process and credential, ended when the client goes. The
            # session's queues were checked by the claim just made (a credential it served
            # directly covers every queue), which is the poll's first fetch.
            s = scope(req, "workers:consume")
            made = [rows]

            def fetch() -> list:
                return made.pop() if made else claim(s.namespace_id)

            queues = s.db.query(SESSION_QUEUES, (session_id, s.namespace_id))
            with (
                self.gate.admit(s.principal.credential_id),
                self.wakeups.listen(q["public_id"] for q in queues) as waiter,
            ):
                rows = longpoll.poll(
                    fetch,
                    body["wait_ms"],
                    self.sleep,
                    self.clock,
                    lambda: bool(
                        s.db.call("session_ready", s.namespace_id, session_id)[0][0]["ready"]
                    ),
                    peer_gone(req.env.get("gunicorn.socket")),
                    self.gate.crowd_pause,
                    waiter.wait,
                )
        ok_text(req, resp, f'{{"assignments": {serialize.assignments_json(rows)}}}')

    def on_post_report_claim(
        self, req: falcon.Request, resp: falcon.Response, session_id: str
    ) -> None:
        """The results of a batch (each its own answer, as POST /v1/attempts/result), then a
        claim of up to ``max`` without the long poll, in one transaction: a worker's round
        between handlers finishing and new ones starting, one call instead of two."""
        body = own_body(req, worker_shapes.WORKER_REPORT_CLAIM, self.max_body, "workers:consume")
        results, most = body["results"], body["max"]
        granted: list = []

        def report(caller: batches.Caller, chosen: list[dict]) -> list:
            answers, rows = batches.report_claim(
                req.context.db, caller, session_id, chosen, most, body["start"]
            )
            granted.extend(rows)
            return answers

        def scoped(s) -> list:
            s.check_session_queues(session_id)
            return in_scope_results(
                s, results, lambda chosen: report(s.namespace_id, chosen), run_empty=True
            )

        answers = as_caller(req, "workers:consume", lambda bearer: report(bearer, results), scoped)
        results_json = json.dumps([item(a) for a in answers], ensure_ascii=False)
        ok_text(
            req,
            resp,
            f'{{"results": {results_json}, "assignments": {serialize.assignments_json(granted)}}}',
        )

    def on_post_goodbye(self, req: falcon.Request, resp: falcon.Response, session_id: str) -> None:
        s = scope(req, "workers:connect")
        read_json(req, validation.EMPTY, self.max_body)
        s.check_session_queues(session_id)
        [[row]] = s.db.call("worker_goodbye", s.namespace_id, session_id)
        ok(
            req,
            resp,
            {
                "session_id": row["session_id"],
                "state": row["state"],
                "in_flight": row["in_flight"],
                "capacity": row["capacity"],
                "concurrency_keys": bool(row["concurrency_keys"]),
            },
        )
