"""How a :class:`~orbit_shell.sdk.worker.Worker` reports outcomes: in batches, each within a
request body's bound, resent whole while the server is unavailable (an identical result is
idempotent), and claiming in the same request what the report frees (``claim_with_report``).

A mixin of the worker: it reads the worker's queue of outcomes, its slots and its transport,
and hands what a report claimed to the worker's dispatch.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Sequence
from typing import Any

from orbit_shell.sdk.models import ApiError, LeaseLostError, UnavailableError
from orbit_shell.sdk.protocol import TaskEvent
from orbit_shell.validation import BATCH_MAX, MAX_BODY_BYTES

log = logging.getLogger("orbit.worker")

# A report's body besides its outcomes: the session id, the claim's size and flag.
REPORT_ENVELOPE_BYTES = 4096


class Reporting:
    def _report_loop(self) -> None:
        """Send the handlers' outcomes in order: each report carries what finished within
        ``report_linger`` of the first one (up to 100, and no more than a request body holds),
        or goes as soon as it holds every attempt in flight (a slot is freed only after its
        report, so those are all there is). An outcome that would take a report over the body's
        bound starts the next one instead: the server refuses such a report whole (413)."""
        carried = None
        while True:
            first = carried if carried is not None else self._reports.get()
            carried = None
            if first is None:
                return
            batch, size = [first], REPORT_ENVELOPE_BYTES + first[-1]
            linger = time.monotonic() + self.report_linger
            while len(batch) < BATCH_MAX and len(batch) < self._started_unreported():
                try:
                    item = self._reports.get(timeout=max(0.0, linger - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    self._reports.put(None)  # finish this batch, then stop
                    break
                if size + item[-1] > MAX_BODY_BYTES:
                    carried = item
                    break
                batch.append(item)
                size += item[-1]
            self._report(batch)

    def _report(self, batch: list[tuple]) -> None:
        payload = [
            {
                "attempt_id": event.attempt_id,
                "outcome": outcome,
                "retryable": retryable,
                "result": result,
                "error": error,
            }
            for event, outcome, retryable, result, error, _ in batch
        ]
        events = [event for event, *_ in batch]
        want, owns = self._claim_with(events)
        try:
            self._send_report(batch, payload, events, want)
        finally:
            with self._slots:
                self._unreported -= len(batch)
                if owns:
                    self._claiming = False
                self._slots.notify_all()

    def _send_report(
        self, batch: list[tuple], payload: list[dict], events: list[TaskEvent], want: int
    ) -> None:
        """Send one report (claiming ``want`` in the same request) and dispatch its answer."""
        answers: list[Any] = [None] * len(batch)
        wires: list[dict[str, Any]] = []
        lost = False  # a report that claimed and started lost its answer
        backoff = 0.1
        for _ in range(8):  # an identical result is idempotent, so resending the batch is safe
            try:
                if want:
                    answers, wires = self.transport.report_and_claim(
                        self.session_id, payload, want, self.start_with_claim
                    )
                else:
                    answers = self.transport.result_many(self.session_id, payload)
                break
            except ApiError as exc:
                if not maybe_committed(exc):  # refused (4xx): nothing was written
                    log.error("results refused: %s", exc, extra={"action": "worker.result"})
                    answers = [exc] * len(batch)
                    break
                # Unavailable, or failed in the server (5xx, perhaps in the claim half and
                # perhaps after the commit): resent as results alone, since a second claim is
                # not idempotent. What a lost answer granted, if it committed, is recovered
                # below when the claim started it (a hello again); else it was never started
                # and comes back when its lease ends. Taken as refused, a 5xx of the claim
                # half cost the results of the whole batch: each task ended at its lease's end.
                lost = lost or (want > 0 and self.start_with_claim)
                want = 0
                log.warning("results failed, retrying: %s", exc, extra={"action": "worker.result"})
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        for (event, outcome, *_), answer in zip(batch, answers, strict=True):
            ids = {
                "attempt_id": event.attempt_id,
                "task_id": event.task.task_id,
                "concurrency_token": event.concurrency_token,
                "concurrency_slot": event.concurrency_slot,
            }
            if answer is None:
                log.error("result not delivered", extra={"action": "worker.result", **ids})
            elif isinstance(answer, LeaseLostError):
                log.warning("result refused: %s", answer, extra={"action": "worker.result", **ids})
            elif isinstance(answer, ApiError):
                log.error("result refused: %s", answer, extra={"action": "worker.result", **ids})
            else:
                log.info("reported %s", outcome, extra={"action": "worker.result", **ids})
        self._dispatch(wires, released=events, started=self.start_with_claim)
        if lost:
            self._recover_grants()

    def _claim_with(self, reported: Sequence[TaskEvent]) -> tuple[int, bool]:
        """How many a report of ``reported`` should claim in the same request (0: report
        alone), and whether that makes it the worker's one claim in flight (single flight).

        Without prefetch (``single_flight``) a report of unkeyed work claims the slots it
        frees unless a claim is in flight already, and the claim loop leaves claiming to the
        reports while handlers run: a busy worker's round is one request and one transaction,
        and two claims never split the work that arrives. On the e2e run of single
        submissions (alternated rounds) that did 1.18-1.30x the tasks at 0.77-0.85x the CPU
        a task of a worker whose reports claimed only when every slot was held; a report that
        claimed beside the claim loop's claims had been no faster, its claims carrying 5.4
        attempts instead of 7.5. With prefetch a report claims only when every slot is held. A
        released key is claimed for either way, one task per key: its result promotes the
        key's next parked task (K6), which a claim in the same transaction takes at once,
        where the long poll would see it only at its next probe, 20-50 ms later; a hot key's
        tasks run one after another, so that wait was most of each one's turn
        (bench/README.md)."""
        if not self.claim_with_report or self._stopping.is_set():
            return 0, False
        keyed = sum(1 for e in reported if e.task.concurrency_key is not None)
        with self._slots:
            held = len(self.inflight)
            room = self.capacity + self.prefetch
            freed = min(room - (held - len(reported)), BATCH_MAX)
            if self.single_flight and not keyed:
                if self._claiming or freed <= 0:
                    return 0, False
                self._claiming = True
                return freed, True
        if held < room:
            freed = min(freed, keyed)
        return freed, False


def maybe_committed(exc: ApiError) -> bool:
    """Whether a failed call may have committed all the same: its answer was lost on the way
    (no answer, 503) or failed after the commit (5xx). A 4xx refused it before anything."""
    return isinstance(exc, UnavailableError) or exc.status >= 500
