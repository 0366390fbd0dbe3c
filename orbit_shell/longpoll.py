"""The bounded long poll shared by the claim route and the direct (MySQL) worker transport."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(
    fetch: Callable[[], list[T]], wait_ms: int, sleep=time.sleep, clock=time.monotonic
) -> list[T]:
    """Call ``fetch`` until it returns something or ``wait_ms`` has passed (pauses 20-250 ms)."""
    deadline = clock() + wait_ms / 1000.0
    pause = 0.02
    while True:
        items = fetch()
        remaining = deadline - clock()
        if items or remaining <= 0:
            return items
        sleep(min(pause, remaining))
        pause = min(pause * 2, 0.25)
