"""How a :class:`~orbit_shell.sdk.worker.Worker` keeps its leases: every attempt it holds is
renewed at a third of the lease, and one the server refuses is marked lost
(``event.lease_lost``) for its handler to see. A mixin of the worker.
"""

from __future__ import annotations

import logging

from orbit_shell.sdk.models import ApiError, LeaseLostError

log = logging.getLogger("orbit.worker")


class LeaseRenewal:
    def _renew_loop(self) -> None:
        interval = max(0.2, self.lease_seconds / 3)
        while not self._done.wait(interval):
            with self._slots:
                events = list(self.inflight.values())
            for event in events:
                try:
                    event.lease_expires_at = self.transport.renew(self.session_id, event.attempt_id)
                except LeaseLostError:
                    event.lease_lost.set()
                    log.warning(
                        "lease lost",
                        extra={"action": "worker.renew", "attempt_id": event.attempt_id},
                    )
                except ApiError as exc:
                    log.debug("renew failed: %s", exc, extra={"action": "worker.renew"})
