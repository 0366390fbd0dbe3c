"""Failed dashboard sign-ins: logged, and limited per client address.

Each server process counts the failures it sees in a sliding window; past the limit an
address is refused (429) until its oldest failure leaves the window. A sign-in form takes a
token, so guessing one is the attack: a token carries 256 random bits, and the limit keeps
a guesser from also costing the database a lookup per try.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

log = logging.getLogger("orbit.ui")


class SignInGuard:
    """At most ``limit`` failed sign-ins per address in ``window`` seconds, per process; at
    most ``addresses`` addresses remembered (the oldest forgotten first)."""

    def __init__(self, limit: int = 10, window: float = 60.0, addresses: int = 10_000) -> None:
        self.limit, self.window, self.addresses = limit, window, addresses
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()

    def wait(self, address: str) -> int:
        """Seconds ``address`` must wait before its next try; 0 when it may try now."""
        now = time.monotonic()
        with self._lock:
            failures = self._failures.get(address)
            if failures is None:
                return 0
            while failures and failures[0] <= now - self.window:
                failures.popleft()
            if len(failures) < self.limit:
                return 0
            return max(1, int(failures[0] + self.window - now) + 1)

    def failed(self, address: str, why: str) -> None:
        log.warning(
            "dashboard sign-in refused",
            extra={"action": "ui.sign_in_refused", "client": address, "reason": why},
        )
        with self._lock:
            failures = self._failures.pop(address, None) or collections.deque()
            failures.append(time.monotonic())
            self._failures[address] = failures
            while len(self._failures) > self.addresses:
                self._failures.popitem(last=False)
