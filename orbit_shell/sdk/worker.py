"""The polling worker SDK (W4, W5).

A :class:`Worker` says hello once, claims with a bounded long poll, confirms **start** before a
handler runs, renews leases in the background, reports results and drains on shutdown.
Without prefetch every attempt a claim returns has a free handler, so the claim starts them in
its own transaction (``start_with_claim``) and each runs when the answer arrives; otherwise
what one claim returned is started in one request. Outcomes are reported in batches (what
finishes within ``report_linger`` of the first, sent at once when nothing else is in flight),
each attempt keeping its own answer. With ``prefetch`` the worker holds up to that many
claimed attempts beyond its running handlers, not started, so a freed handler starts the next
one without waiting for a report and a claim. Without prefetch a worker has one claim in flight
(``claim_with_report``): while handlers run, the report claims what the round frees, so a busy
worker's round is one request; a report that releases keys claims one task per key (the key's
next task is promoted in that transaction)::

    worker = Worker([queue_id], url=ORBIT_URL, token=TOKEN, capacity=4)

    @worker.handler("object.update", "v1")
    def update(event):
        store.write(ns, event.task.concurrency_key, event.concurrency_token, op_id, value,
                    slot=event.concurrency_slot)

    worker.run(install_signals=True)   # SIGTERM/SIGINT: stop claiming, finish, goodbye

Handlers return a JSON value (``succeeded``), raise :class:`Retry` (``failed``, retryable),
raise :class:`UnknownOutcome` (``unknown`` -> NEEDS_REVIEW), or raise anything else
(``failed``, not retryable).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.leases import LeaseRenewal
from orbit_shell.sdk.models import ApiError, ProtocolError, UnavailableError
from orbit_shell.sdk.protocol import (
    ProtocolGuard,
    Retry,
    TaskEvent,
    UnknownOutcome,
    outcome_of,
)
from orbit_shell.sdk.reporting import Reporting, maybe_committed
from orbit_shell.sdk.transport import Hello, HttpTransport, Transport
from orbit_shell.validation import BATCH_MAX

# What a worker's module imports from here; Retry, UnknownOutcome and TaskEvent live in
# protocol.py with the rest of what handlers receive and raise.
__all__ = ["Retry", "TaskEvent", "UnknownOutcome", "Worker"]

log = logging.getLogger("orbit.worker")

SESSION_CAPACITY_MAX = 1000  # what POST /v1/workers/hello accepts
# Seconds the claim loop of a worker with handlers running leaves claiming to their reports
# after its last dispatch: a no-op round reports well within it, and handlers that run longer
# keep free slots idle no longer than this before the long poll claims for them.
CLAIM_DEFER = 0.02


Handler = Callable[[TaskEvent], Any]


class Worker(Reporting, LeaseRenewal):
    """A polling worker process (or thread).

    Args:
        queue_ids: queues to claim from.
        url, token: the Orbit server and a credential with workers:connect/consume (HTTP);
            without them (and without a transport) call :meth:`connect` before running.
        transport: another transport instead (e.g.
            :class:`~orbit_shell.sdk.transport.MysqlTransport`).
        capacity: handlers running at once.
        prefetch: attempts the worker may hold claimed beyond ``capacity`` (leased, renewed,
            not started until a handler is free; the session's capacity is their sum).
            Without it a handler slot frees only once its result is recorded and a new claim
            returned, so short handlers run in lockstep with the three requests of a round.
        worker_id: stable identity; a fresh one per process by default.
        concurrency_keys: declare support for keyed tasks (default True, W4).
        wait_ms: long-poll wait of a claim.
        drain_timeout: seconds in-flight work may take to finish when draining.
        report_linger: seconds a finished outcome waits for others to share its report (the
            handlers of one claim tend to finish together; one request beats several). A
            report goes at once when it holds everything in flight: nothing else could join.
        claim_with_report: a report claims in the same request and transaction (``POST
            /v1/workers/{id}/report-and-claim``): without prefetch, the slots it frees when no
            other claim is in flight, and the claim loop leaves a busy worker's claiming to
            its reports (one request and one commit fewer per round); with prefetch, the
            slots it frees when every slot is held. A report that releases keys claims one
            task per key (it takes the key's next task at once, where the long poll would
            find it only at its next probe).
        start_with_claim: without prefetch, claims (and reports that claim) start what they
            grant in the same transaction: one request and one commit fewer per round. After
            a claim whose answer was lost the worker says hello again and runs what the
            session holds that it did not know; an attempt started so whose worker is killed
            before its handler ends ``UNKNOWN`` when its lease runs out, as one started on its
            own would. With False each claim's attempts are started in a request of their
            own, and one not yet started when the worker dies expires and is retried.
    """

    def __init__(
        self,
        queue_ids: Sequence[str] = (),
        *,
        url: str | None = None,
        token: str | None = None,
        transport: Transport | None = None,
        capacity: int = 4,
        prefetch: int = 0,
        worker_id: str | None = None,
        concurrency_keys: bool = True,
        wait_ms: int = 2000,
        drain_timeout: float = 30.0,
        max_idle_backoff: float = 5.0,
        report_linger: float = 0.005,
        claim_with_report: bool = True,
        start_with_claim: bool = True,
    ) -> None:
        if transport is None and url and token:
            transport = HttpTransport(Client(url, token))
        if capacity < 1 or prefetch < 0 or capacity + prefetch > SESSION_CAPACITY_MAX:
            raise ValueError(
                "capacity must be at least 1, prefetch at least 0, and their sum (the "
                f"session's capacity) at most {SESSION_CAPACITY_MAX}"
            )
        # None until connect(): a module can declare a worker and its handlers, and the
        # command that runs it (orbit-worker) says where the server is.
        self.transport: Transport | None = transport
        self.queue_ids = list(queue_ids)
        self.capacity = capacity
        self.prefetch = prefetch
        self.worker_id = worker_id or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        )
        self.concurrency_keys = concurrency_keys
        self.wait_ms = wait_ms
        self.drain_timeout = drain_timeout
        self.max_idle_backoff = max_idle_backoff
        self.report_linger = report_linger
        self.claim_with_report = claim_with_report
        # With prefetch a claimed attempt may wait for a handler: it is started when one frees.
        self.start_with_claim = start_with_claim and prefetch == 0
        self.handlers: dict[tuple[str, str], Handler] = {}
        self.guard = ProtocolGuard(concurrency_keys)
        self.session_id: str | None = None
        self.lease_seconds = 30
        # Every attempt held, until its result is recorded: waiting (leased, not started),
        # running, or finished and awaiting its report. The session's capacity bounds it.
        self.inflight: dict[str, TaskEvent] = {}
        self._waiting: collections.deque[TaskEvent] = collections.deque()
        self._running = 0  # attempts started whose handler has not returned
        self._closing = threading.Event()  # the drain is over: start nothing more
        self._start_lock = threading.Lock()  # held while a batch is being started
        self.drained = False
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._slots = threading.Condition()
        self._reports: queue.SimpleQueue = queue.SimpleQueue()
        # One claim in flight (no prefetch): two split what arrives into smaller claims.
        self.single_flight = claim_with_report and self.start_with_claim
        self._claiming = False  # a claim, or a report that claims, is in flight
        self._unreported = 0  # outcomes queued for a report and not yet answered
        self._defer_until = 0.0  # the claim loop leaves claiming to reports until then
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    # Registration ---------------------------------------------------------------------------
    def register(self, name: str, version: str, fn: Handler) -> None:
        self.handlers[(name, version)] = fn

    def handler(self, name: str, version: str = "v1") -> Callable[[Handler], Handler]:
        def decorate(fn: Handler) -> Handler:
            self.register(name, version, fn)
            return fn

        return decorate

    def connect(self, url: str, token: str) -> Worker:
        """Talk to the server at ``url`` with ``token`` (a worker made without them)."""
        self.transport = HttpTransport(Client(url, token))
        return self

    # Lifecycle ------------------------------------------------------------------------------
    def _check_ready(self) -> None:
        if self.transport is None:
            raise ValueError("give url and token, or a transport, or call connect() first")
        if not self.queue_ids:
            raise ValueError("give the worker at least one queue id")

    def start(self) -> Worker:
        """Run in a background thread; returns at once."""
        self._check_ready()
        self._thread = threading.Thread(
            target=self.run, name=f"orbit-{self.worker_id}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the worker to drain: stop claiming, let in-flight work finish, say goodbye."""
        self._stopping.set()
        with self._slots:
            self._slots.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Stop and wait for the drain; True when every in-flight attempt finished."""
        self.stop()
        self._done.wait(timeout if timeout is not None else self.drain_timeout + 10)
        return self.drained

    def run(self, install_signals: bool = False) -> None:
        self._check_ready()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        self._pool = ThreadPoolExecutor(self.capacity, thread_name_prefix="orbit-handler")
        reporter = threading.Thread(target=self._report_loop, name="orbit-report", daemon=True)
        reporter.start()
        starter = threading.Thread(target=self._start_loop, name="orbit-start", daemon=True)
        starter.start()
        try:
            if self._hello():
                renewer = threading.Thread(target=self._renew_loop, daemon=True)
                renewer.start()
                self._claim_loop()
            self._finish()
        finally:
            self._closing.set()
            self._reports.put(None)
            self._done.set()

    # Internals ------------------------------------------------------------------------------
    def _say_hello(self) -> Hello:
        """Register, or resume: the same identity gets its session and what it holds back,
        a page at a time (each page's payloads within a request body's bound, L1)."""
        pages: list[dict[str, Any]] = []
        after = None
        while True:
            hello = self.transport.hello(
                self.worker_id,
                self.queue_ids,
                self.capacity + self.prefetch,
                self.concurrency_keys,
                after,
            )
            pages.extend(hello.in_flight)
            after = hello.in_flight_after
            if after is None:
                return dataclasses.replace(hello, in_flight=pages)

    def _hello(self) -> bool:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                hello = self._say_hello()
            except UnavailableError as exc:
                log.warning("hello failed: %s", exc, extra={"action": "worker.hello"})
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_idle_backoff)
                continue
            self.session_id, self.lease_seconds = hello.session_id, hello.lease_seconds
            log.info(
                "session open",
                extra={
                    "action": "worker.hello",
                    "session_id": self.session_id,
                    "in_flight": len(hello.in_flight),
                },
            )
            self._dispatch(hello.in_flight)
            return True
        return False

    def _claim_loop(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            with self._slots:
                free = self.capacity + self.prefetch - len(self.inflight)
                if free <= 0:
                    self._slots.wait(0.5)
                    continue
                if self.single_flight and self._claiming:
                    self._slots.wait(0.5)  # a report's claim: its answer may fill the slots
                    continue
                if self.single_flight and (self._unreported or self._running):
                    left = self._defer_until - time.monotonic()
                    if left > 0:  # their report will claim
                        self._slots.wait(left)
                        continue
                self._claiming = True
            try:
                try:
                    assignments = self.transport.claim(
                        self.session_id, min(free, BATCH_MAX), self.wait_ms, self.start_with_claim
                    )
                finally:
                    with self._slots:
                        self._claiming = False
                        self._slots.notify_all()
                backoff = 0.1
            except ApiError as exc:
                log.warning("claim failed: %s", exc, extra={"action": "worker.claim"})
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, self.max_idle_backoff)
                if self.start_with_claim and maybe_committed(exc):
                    self._recover_grants()
                continue
            self._dispatch(assignments, started=self.start_with_claim)

    def _dispatch(
        self,
        wires: list[dict[str, Any]],
        released: Sequence[TaskEvent] = (),
        started: bool = False,
    ) -> int:
        """Check the assignments (W5) and queue them for the starter, or, when the claim
        ``started`` them, hand them to the handlers at once; how many were new to the worker.
        ``released`` (reported events) leave the slots in the same step, so the claim loop
        never sees the slots a report-and-claim refilled as free."""
        events = []
        for wire in wires:
            if wire["attempt_id"] in self.inflight:
                continue
            try:
                events.append(self.guard.check(wire))
            except ProtocolError as exc:
                # Never run it: its lease will expire and the server recovers the attempt.
                log.error(
                    "refused assignment: %s",
                    exc,
                    extra={"action": "worker.protocol", "attempt_id": wire.get("attempt_id")},
                )
        if not (events or released):
            return 0
        with self._slots:
            # Checked again under the lock: a hello after a lost answer (_recover_grants) may
            # answer what another thread's claim is dispatching at the same time.
            events = [e for e in events if e.attempt_id not in self.inflight]
            for event in released:
                self.inflight.pop(event.attempt_id, None)
            for event in events:
                self.inflight[event.attempt_id] = event
            self._defer_until = time.monotonic() + CLAIM_DEFER
            if started:
                self._running += len(events)
            else:
                self._waiting.extend(events)
            self._slots.notify_all()
        for event in events if started else ():
            self._run(event)
        return len(events)

    def _recover_grants(self) -> None:
        """After a claim that started what it granted and whose answer was lost: if it
        committed, those attempts are this session's and RUNNING, and unrun they would end
        UNKNOWN at their lease's end. A hello again answers every attempt the session holds
        (L3); the ones this worker does not know are started (a repeat, harmless) and run."""
        try:
            hello = self._say_hello()
        except ApiError as exc:
            log.warning(
                "hello after a lost claim failed: %s", exc, extra={"action": "worker.hello"}
            )
            return
        recovered = self._dispatch(hello.in_flight)
        if recovered:
            log.info(
                "attempts of a lost claim answer recovered",
                extra={"action": "worker.claim", "in_flight": recovered},
            )

    def _start_loop(self) -> None:
        """Start waiting attempts as handlers free up, several in one request. When more wait
        than handlers are free, the freed slots gather for up to ``report_linger`` (handlers
        of one claim tend to finish together); without prefetch everything waiting fits."""
        while not self._closing.is_set():
            with self._slots:
                if not (self._waiting and self._running < self.capacity):
                    self._slots.wait(0.5)
                    continue
                linger = time.monotonic() + self.report_linger
                while (
                    0 < self._running
                    and self.capacity - self._running < len(self._waiting)
                    and time.monotonic() < linger
                ):
                    self._slots.wait(max(0.0, linger - time.monotonic()))
            with self._start_lock:
                if self._closing.is_set():
                    return  # never started: each lease expires and the server recovers it
                with self._slots:
                    n = min(len(self._waiting), self.capacity - self._running, BATCH_MAX)
                    batch = [self._waiting.popleft() for _ in range(n)]
                    self._running += len(batch)
                if batch:
                    self._start(batch)

    def _start(self, events: list[TaskEvent]) -> None:
        """Start the attempts in one request and run the ones that started. Nothing here may
        end the starter thread: an attempt that cannot be run is left to its lease."""
        try:
            started = self.transport.start_many(self.session_id, [e.attempt_id for e in events])
        except Exception as exc:  # noqa: BLE001 - an ApiError, or a transport fault
            # Not started, so nothing ran: each lease expires and the server recovers it.
            log.warning("start failed: %s", exc, extra={"action": "worker.start"})
            started = [exc] * len(events)
        for event, outcome in zip(events, started, strict=True):
            if isinstance(outcome, Exception):
                log.warning(
                    "start refused: %s",
                    outcome,
                    extra={"action": "worker.start", "attempt_id": event.attempt_id},
                )
                self._handler_done()
                self._release_slot(event)
                continue
            self._run(event)

    def _run(self, event: TaskEvent) -> None:
        """Hand a started attempt (counted in ``_running``) to a handler thread."""
        try:
            self._pool.submit(self._execute, event)
        except RuntimeError:  # the pool is shut down: the drain is over
            log.warning(
                "started but not run: worker closing",
                extra={"action": "worker.start", "attempt_id": event.attempt_id},
            )
            self._handler_done()
            self._release_slot(event)

    def _started_unreported(self) -> int:
        with self._slots:
            return len(self.inflight) - len(self._waiting)

    def _handler_done(self, owed: int = 0) -> None:
        """A handler returned; ``owed``: the outcomes it left for a report (0 or 1)."""
        with self._slots:
            self._running -= 1
            self._unreported += owed
            self._slots.notify_all()

    def _execute(self, event: TaskEvent) -> None:
        try:
            outcome = outcome_of(
                self.handlers.get((event.task.handler, event.task.handler_version)), event
            )
        except BaseException:
            self._handler_done()
            self._release_slot(event)
            raise
        self._handler_done(owed=1)  # counted before it is queued: its report will claim
        self._reports.put((event, *outcome))  # its size last, as the report loop reads it

    def _release_slot(self, event: TaskEvent) -> None:
        with self._slots:
            self.inflight.pop(event.attempt_id, None)
            self._slots.notify_all()

    def _finish(self) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self._slots:
            while self.inflight and time.monotonic() < deadline:
                self._slots.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self.drained = not self.inflight
        self._closing.set()
        with self._start_lock:
            pass  # a batch being started is handed to the pool before the pool shuts down
        if self.session_id:
            try:
                self.transport.goodbye(self.session_id)
            except ApiError as exc:
                log.warning("goodbye failed: %s", exc, extra={"action": "worker.goodbye"})
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info(
            "drained" if self.drained else "stopped with work in flight",
            extra={"action": "worker.drain", "session_id": self.session_id},
        )
