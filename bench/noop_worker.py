"""An SDK worker process with a no-op handler, for the end-to-end benchmark."""

from __future__ import annotations

import os
import resource
import sys

from orbit_shell.worker import Worker


def main() -> None:
    worker = Worker(
        os.environ["QUEUE_IDS"].split(","),
        url=os.environ["ORBIT_URL"],
        token=os.environ["ORBIT_TOKEN"],
        capacity=int(os.environ.get("CAPACITY", "8")),
        wait_ms=1000,
        drain_timeout=10,
    )
    worker.register("noop", "v1", lambda event: None)
    worker.run(install_signals=True)
    # ru_maxrss is in KiB on Linux.
    print(f"rss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
