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
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, credential: str) -> None:
        """Raise QUOTA_EXCEEDED when ``credential``'s bucket has no submission left, spending
        nothing: for a route that learns whether the caller is who it says only from the call
        itself, which then ``spend``s. Only a caller who got through ever has a bucket."""
        if self.rate <= 0:
            return
        with self._lock:
            if credential not in self._buckets:
                return
            tokens = self._level(credential, self.clock())
        if tokens < 1.0:
            raise self._refused(1.0, tokens)

    def spend(self, credential: str) -> None:
        """Spend one submission of ``credential`` (after ``check``), down to none left."""
        if self.rate <= 0:
            return
        now = self.clock()
        with self._lock:
            self._buckets[credential] = (max(0.0, self._level(credential, now) - 1.0), now)

    def take(self, credential: str, count: int = 1) -> None:
        """Spend ``count`` submissions (a batch larger than the burst spends the whole burst);
        raise QUOTA_EXCEEDED (retry_after set) when they are not there."""
        if self.rate <= 0:
            return
        need = float(min(count, self.burst))
        now = self.clock()
        with self._lock:
            tokens = self._level(credential, now)
            if tokens < need:
                self._buckets[credential] = (tokens, now)
                raise self._refused(need, tokens)
            self._buckets[credential] = (tokens - need, now)

    def _level(self, credential: str, now: float) -> float:
        """The submissions ``credential`` has at ``now``: a full burst for a new one, else what
        was left refilled at ``rate`` up to the burst. The caller holds the lock."""
        tokens, last = self._buckets.get(credential, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - last) * self.rate)

    def _refused(self, need: float, tokens: float) -> errors.QuotaExceeded:
        error = errors.QuotaExceeded("submission rate limit of this credential reached")
        error.retry_after = math.ceil((need - tokens) / self.rate)
        return error
