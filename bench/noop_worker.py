"""An SDK worker process with a no-op handler, for the end-to-end benchmark: over HTTP, or
over the direct MySQL transport when ``ORBIT_WORKER_DSN`` is set; ``CLAIM_WITH_REPORT=0``
reports and claims in separate calls (the worker's ``claim_with_report``), and
``START_WITH_CLAIM=0`` starts what a claim returned in a request of its own
(``start_with_claim``).

On exit it prints its peak RSS, the CPU it used from ready to exit (the client's share of
a drain: a worker without prefetch waits on its own calls, so this CPU is on the round's path)
and, per worker call (claim, start, result, report_claim), how
many requests it made, how many attempts they carried (the batch sizes the run actually
reached; for report_claim, the results) and the seconds it waited on them. Claims that came
back empty are counted apart (``claim_empty``): each is a long poll that waited up to
``wait_ms`` for work, such as the last one of a drain, and would otherwise add a second to the
claims' total."""

from __future__ import annotations

import functools
import os
import resource
import sys
import threading
import time

from orbit_shell.sdk.transport import MysqlTransport
from orbit_shell.sdk.worker import Worker


def counted(fn, name: str, counts: dict, lock: threading.Lock, size):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        spent = time.perf_counter() - t0
        items = size(args, out)
        key = name if items or name != "claim" else "claim_empty"
        with lock:
            calls, total, seconds = counts.get(key, (0, 0, 0.0))
            counts[key] = (calls + 1, total + items, seconds + spent)
        return out

    return call


def main() -> None:
    if os.environ.get("ORBIT_WORKER_DSN"):  # the direct transport (W9)
        where = {
            "transport": MysqlTransport(
                os.environ["ORBIT_WORKER_DSN"],
                os.environ["ORBIT_APPLICATION"],
                os.environ["ORBIT_ENVIRONMENT"],
                os.environ["ORBIT_NAMESPACE"],
            )
        }
    else:
        where = {"url": os.environ["ORBIT_URL"], "token": os.environ["ORBIT_TOKEN"]}
    worker = Worker(
        os.environ["QUEUE_IDS"].split(","),
        **where,
        capacity=int(os.environ.get("CAPACITY", "8")),
        prefetch=int(os.environ.get("PREFETCH", "0")),
        wait_ms=1000,
        drain_timeout=10,
        claim_with_report=os.environ.get("CLAIM_WITH_REPORT", "1") == "1",
        start_with_claim=os.environ.get("START_WITH_CLAIM", "1") == "1",
    )
    worker.register("noop", "v1", lambda event: None)
    counts: dict[str, tuple[int, int, float]] = {}
    lock = threading.Lock()
    t = worker.transport
    t.claim = counted(t.claim, "claim", counts, lock, lambda a, out: len(out))
    t.start_many = counted(t.start_many, "start", counts, lock, lambda a, out: len(a[1]))
    t.result_many = counted(t.result_many, "result", counts, lock, lambda a, out: len(a[1]))
    t.report_and_claim = counted(
        t.report_and_claim, "report_claim", counts, lock, lambda a, out: len(a[1])
    )
    # CLOCK_MONOTONIC, comparable across processes: the drain's clock starts here.
    print(f"ready={time.monotonic()}", flush=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    ready_cpu = usage.ru_utime + usage.ru_stime
    worker.run(install_signals=True)
    # ru_maxrss is in KiB on Linux.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"rss_kib={usage.ru_maxrss}", flush=True)
    # CPU from ready (after imports and connecting) to the end of the drain.
    print(f"cpu_s={usage.ru_utime + usage.ru_stime - ready_cpu:.3f}", flush=True)
    for name, (calls, items, seconds) in sorted(counts.items()):
        print(f"calls_{name}={calls},{items},{seconds:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
