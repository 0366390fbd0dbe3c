"""The lease sweeper, one of the background loops of an `orbit` server.

Every gunicorn worker process starts one, and it sweeps while its process leads
(``leader.Leadership``: one leader per database). Several sweeping at once would still be
safe: each step is an idempotent procedure that locks what it changes (lease_sweep).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable

from orbit_shell import errors
from orbit_shell.engine.db import Database

log = logging.getLogger("orbit.sweeper")


class Sweeper(threading.Thread):
    """Calls ``lease_sweep`` about every ``interval`` seconds until stopped."""

    def __init__(
        self,
        database: Database,
        interval: float = 1.0,
        batch: int = 500,
        active: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(name="orbit-sweeper", daemon=True)
        self.database = database
        self.active = active  # whether this process leads: only the leader sweeps
        self.interval = interval
        self.batch = batch
        self.stopped = threading.Event()

    def sweep_once(self) -> dict[str, int]:
        [[row]] = self.database.call("lease_sweep", self.batch)
        if any(row.values()):
            log.info("swept", extra={"action": "sweep", **row})
        return row

    def run(self) -> None:
        # Jitter the phase so that several processes do not sweep in lock-step.
        self.stopped.wait(random.uniform(0, self.interval))
        while not self.stopped.is_set():
            try:
                if self.active():
                    self.sweep_once()
            except errors.OrbitError as exc:
                log.warning("sweep failed: %s", exc.message, extra={"action": "sweep"})
            self.stopped.wait(self.interval)

    def stop(self) -> None:
        self.stopped.set()
