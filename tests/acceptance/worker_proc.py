"""A worker process for acceptance tests: its handler announces itself, sleeps, then writes
through the SQL fenced store with its token and slot. Configured by environment variables."""

from __future__ import annotations

import os
import sys
import threading
import time

from orbit_shell import logs
from orbit_shell.sdk.fence import SqlFencedStore, StaleTokenError
from orbit_shell.sdk.worker import Worker

_OUT = threading.Lock()


def say(line: str) -> None:
    """One whole line per write: handler threads must not interleave their output."""
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    logs.configure()
    store = SqlFencedStore(os.environ["FENCE_DSN"], os.environ["FENCE_NAMESPACE"])
    worker = Worker(
        [os.environ["QUEUE_ID"]],
        url=os.environ["ORBIT_URL"],
        token=os.environ["ORBIT_TOKEN"],
        capacity=2,
        prefetch=int(os.environ.get("PREFETCH", "0")),
        wait_ms=500,
        drain_timeout=5,
    )

    @worker.handler("object.update", "v1")
    def update(event):
        # time.monotonic() is CLOCK_MONOTONIC: comparable across processes on one machine.
        key = event.task.concurrency_key
        say(f"started {event.attempt_id} {event.concurrency_token} {key} {time.monotonic()}")
        time.sleep(float(os.environ.get("HANDLER_SLEEP", "0")))
        try:
            store.write(
                os.environ["FENCE_NAMESPACE"],
                event.task.concurrency_key,
                event.concurrency_token,
                event.task.task_id,
                os.environ.get("VALUE", "v"),
                slot=event.concurrency_slot,
            )
        except StaleTokenError:
            say(f"stale {event.attempt_id} {event.concurrency_token}")
            raise
        slot = event.concurrency_slot
        say(f"wrote {event.attempt_id} {event.concurrency_token} {key} {time.monotonic()} {slot}")
        return {"token": str(event.concurrency_token)}

    worker.run(install_signals=True)
    say(f"drained={worker.drained}")


if __name__ == "__main__":
    sys.exit(main())
