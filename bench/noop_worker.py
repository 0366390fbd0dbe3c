"""An SDK worker process with a no-op handler, for the end-to-end benchmark.

On exit it prints its peak RSS and, per worker call (claim, start, result), how many requests
it made and how many attempts they carried: the batch sizes the run actually reached."""

from __future__ import annotations

import functools
import os
import resource
import sys
import threading

from orbit_shell.worker import Worker


def counted(fn, name: str, counts: dict, lock: threading.Lock, size):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)
        with lock:
            calls, items = counts.get(name, (0, 0))
            counts[name] = (calls + 1, items + size(args, out))
        return out

    return call


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
    counts: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    t = worker.transport
    t.claim = counted(t.claim, "claim", counts, lock, lambda a, out: len(out))
    t.start_many = counted(t.start_many, "start", counts, lock, lambda a, out: len(a[1]))
    t.result_many = counted(t.result_many, "result", counts, lock, lambda a, out: len(a[1]))
    worker.run(install_signals=True)
    # ru_maxrss is in KiB on Linux.
    print(f"rss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", flush=True)
    for name, (calls, items) in sorted(counts.items()):
        print(f"calls_{name}={calls},{items}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
