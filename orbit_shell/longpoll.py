"""The bounded long poll shared by the claim route and the direct (MySQL) worker transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

PROBE_PAUSE = 0.02  # seconds between the first probes of a waiting claim
PROBE_PAUSE_MAX = 0.05  # ... doubling every three probes up to this


def poll(
    fetch: Callable[[], list[T]],
    wait_ms: int,
    sleep=time.sleep,
    clock=time.monotonic,
    ready: Callable[[], bool] | None = None,
) -> list[T]:
    """Call ``fetch`` until it returns something or ``wait_ms`` has passed.

    Without ``ready`` the poll fetches again after 20 ms, then twice as long each time up to
    250 ms. ``ready`` is a cheap read (would ``fetch`` find something?): with it the poll
    fetches only when it says yes, asking every 20 ms at first and every 50 ms once the wait is
    long, so work that arrives is taken within 20-50 ms instead of up to 250. A yes whose fetch
    comes back empty (another worker was first, or a quota) is followed by the backoff above
    before the next probe, so a probe that keeps saying yes costs what polling without it does.
    """
    deadline = clock() + wait_ms / 1000.0
    pause = 0.02
    wrong = False  # the last fetch followed a yes and found nothing
    while True:
        items = fetch()
        remaining = deadline - clock()
        if items or remaining <= 0:
            return items
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
            sleep(min(probe, left))
            probes += 1
            if probes % 3 == 0:
                probe = min(probe * 2, PROBE_PAUSE_MAX)
            if ready():
                wrong = True  # until the fetch it asked for finds something
                break
