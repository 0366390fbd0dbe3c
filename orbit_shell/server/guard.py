"""Per-credential submission guard: a token bucket per credential and process that answers
429 QUOTA_EXCEEDED (with Retry-After) instead of letting one producer swamp the server.

It is per gunicorn worker process, so the effective limit is (rate x processes); it protects
the server from overload, it is not a billing quota (those live in the database).
"""

from __future__ import annotations

import math
import threading
import time

from orbit_shell import errors


class SubmitGuard:
    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[int, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, credential_id: int, count: int = 1) -> None:
        """Spend ``count`` submissions (a batch larger than the burst spends the whole burst);
        raise QUOTA_EXCEEDED (retry_after set) when they are not there."""
        if self.rate <= 0:
            return
        need = float(min(count, self.burst))
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(credential_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens < need:
                self._buckets[credential_id] = (tokens, now)
                error = errors.QuotaExceeded("submission rate limit of this credential reached")
                error.retry_after = math.ceil((need - tokens) / self.rate)
                raise error
            self._buckets[credential_id] = (tokens - need, now)
