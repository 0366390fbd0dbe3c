"""The bounded long poll shared by the claim route and the direct (MySQL) worker transport,
and the gate that bounds how many long polls one server process holds (L1)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from orbit_shell import errors

T = TypeVar("T")

PROBE_PAUSE = 0.02  # seconds between the first probes of a waiting claim
PROBE_PAUSE_MAX = 0.05  # ... doubling every three probes up to this


def poll(
    fetch: Callable[[], list[T]],
    wait_ms: int,
    sleep=time.sleep,
    clock=time.monotonic,
    ready: Callable[[], bool] | None = None,
    gone: Callable[[], bool] | None = None,
    crowd_pause: Callable[[], float] | None = None,
    wake: Callable[[float], bool] | None = None,
) -> list[T]:
    """Call ``fetch`` until it returns something or ``wait_ms`` has passed.

    Without ``ready`` the poll fetches again after 20 ms, then twice as long each time up to
    250 ms. ``ready`` is a cheap read (would ``fetch`` find something?): with it the poll
    fetches only when it says yes, asking every 20 ms at first and every 50 ms once the wait is
    long, so work that arrives is taken within 20-50 ms instead of up to 250. A yes whose fetch
    comes back empty (another worker was first, or a quota) is followed by the backoff above
    before the next probe, so a probe that keeps saying yes costs what polling without it does.

    ``gone`` says whether the client went away; when it does the poll ends at its next pause
    with nothing (L1: an abandoned poll must not keep probing the database for its wait).
    ``crowd_pause`` is the least pause between probes while many polls wait in this process
    (``PollGate.crowd_pause``), so that their probes together stay within a budget.
    ``wake(seconds)`` waits between probes instead of ``sleep`` and returns True when a
    submission to one of the poll's queues woke it (``server.wakeups``): the poll then fetches
    at once, without probing first.
    """
    deadline = clock() + wait_ms / 1000.0
    pause = 0.02
    wrong = False  # the last fetch followed a yes and found nothing
    while True:
        items = fetch()
        remaining = deadline - clock()
        if items or remaining <= 0:
            return items
        if gone is not None and gone():
            return []
        if ready is None or wrong:
            sleep(min(pause, remaining))
            pause = min(pause * 2, 0.25)
            if ready is None:
                continue
        probe, probes = PROBE_PAUSE, 0
        while True:
            left = deadline - clock()
            if left <= 0:
                return []  # the probe said no to the end: a fetch would find nothing either
            pause_for = min(max(probe, crowd_pause()) if crowd_pause else probe, left)
            if wake is not None and wake(pause_for):
                wrong = True  # as after a yes: the fetch below may find another was first
                break
            if wake is None:
                sleep(pause_for)
            probes += 1
            if probes % 3 == 0:
                probe = min(probe * 2, PROBE_PAUSE_MAX)
            if gone is not None and gone():
                return []
            if ready():
                wrong = True  # until the fetch it asked for finds something
                break


class PollGate:
    """How many long polls one server process holds at once: in all, and per credential.

    The server's bounds are split evenly over its worker processes (each process counts
    only its own polls), so the server as a whole never holds more than its bounds. A poll
    beyond either bound is refused at once with QUOTA_EXCEEDED and Retry-After, instead of
    waiting for room: a client that opens more polls than it is allowed learns so at once.
    """

    RETRY_AFTER = 1  # seconds: long polls end within their wait_ms (at most 30 s)
    # Probes a second one process's waiting polls make together, at most: each costs the
    # database a read, and 64 polls probing every 20-50 ms cost it 1,300-3,200 reads a second,
    # slowing every other tenant. With many polls waiting, the first of them to probe after
    # work arrives still comes soon.
    PROBE_BUDGET = 100.0

    def __init__(self, per_credential: int, total: int, processes: int = 1, gauge=None) -> None:
        self.per_credential = max(1, math.ceil(per_credential / processes))
        self.total = max(1, math.ceil(total / processes))
        self.gauge = gauge  # a prometheus Gauge of the polls held, or None
        self._held: dict[int, int] = {}
        self._count = 0
        self._lock = threading.Lock()

    def crowd_pause(self) -> float:
        """The least seconds between one poll's probes, so all held polls together probe at
        most PROBE_BUDGET times a second."""
        return self._count / self.PROBE_BUDGET

    @contextlib.contextmanager
    def admit(self, credential_id: int) -> Iterator[None]:
        """Hold one poll's place for ``credential_id`` while the block runs.

        Raises:
            QuotaExceeded: the process holds its bound of polls, or the credential its share.
        """
        with self._lock:
            mine = self._held.get(credential_id, 0)
            if self._count >= self.total or mine >= self.per_credential:
                error = errors.QuotaExceeded(
                    "too many long polls open"
                    + (" for this credential" if mine >= self.per_credential else "")
                    + "; claim again later"
                )
                error.retry_after = self.RETRY_AFTER
                raise error
            self._held[credential_id] = mine + 1
            self._count += 1
        if self.gauge is not None:
            self.gauge.inc()
        try:
            yield
        finally:
            if self.gauge is not None:
                self.gauge.dec()
            with self._lock:
                self._count -= 1
                left = self._held[credential_id] - 1
                if left:
                    self._held[credential_id] = left
                else:
                    del self._held[credential_id]
