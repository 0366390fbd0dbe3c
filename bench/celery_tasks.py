"""The Celery side of the celery part: the app and its two tasks, imported by the bench's
Celery workers (``celery -A celery_tasks worker``, run from ``bench/``) and by its producers.

Every task carries the time it was sent. A worker process counts what it ran and writes, in
``CELERY_BENCH_DIR``, its count (``<pid>.count``, rewritten every 20 ms: the driver's "done"),
each task's submit-to-start in milliseconds, and for a keyed task the key with the times its
lock was taken and given back (``<pid>.log``), and ``<pid>.ready`` once it consumes.

``keyed`` is the per-key exclusion users write for Celery: a Redis lock per key (redis-py's
``Lock``, ``SET NX PX`` and a scripted release), taken without waiting; when it is held the
task is retried ``CELERY_RETRY_S`` later. An overlap check counts the holders of the key
inside the lock (``INCR``/``DECR``): any count above one is two tasks of a key at once.
"""

from __future__ import annotations

import os
import threading
import time

import redis
from celery import Celery
from celery.signals import worker_ready, worker_shutdown

BROKER = os.environ.get("CELERY_BROKER", "redis://127.0.0.1:6379/0")
OUT = os.environ.get("CELERY_BENCH_DIR", ".")
RETRY_S = float(os.environ.get("CELERY_RETRY_S", "0.01"))

app = Celery("bench", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    task_default_queue="bench",
    task_acks_late=os.environ.get("CELERY_ACKS_LATE") == "1",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    worker_redirect_stdouts=False,
)


class _Record:
    """This process's tasks: the count, and the lines for the log, written by one thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.lines: list[str] = []
        self.thread: threading.Thread | None = None
        self.client: redis.Redis | None = None

    def add(self, line: str) -> None:
        with self.lock:
            self.count += 1
            self.lines.append(line)
            if self.thread is None:
                self.thread = threading.Thread(target=self._write, daemon=True)
                self.thread.start()

    def redis(self) -> redis.Redis:
        if self.client is None:
            self.client = redis.Redis.from_url(BROKER)
        return self.client

    def flush(self) -> None:
        with self.lock:
            lines, self.lines, count = self.lines, [], self.count
        pid = os.getpid()
        if lines:
            with open(os.path.join(OUT, f"{pid}.log"), "a") as log:
                log.write("".join(lines))
        temporary = os.path.join(OUT, f"{pid}.count.tmp")
        with open(temporary, "w") as f:
            f.write(str(count))
        os.replace(temporary, os.path.join(OUT, f"{pid}.count"))

    def _write(self) -> None:
        while True:
            time.sleep(0.02)
            self.flush()


RECORD = _Record()


@worker_ready.connect
def _ready(**_) -> None:
    with open(os.path.join(OUT, f"{os.getpid()}.ready"), "w") as f:
        f.write(str(time.time()))


@worker_shutdown.connect
def _shutdown(**_) -> None:
    RECORD.flush()


@app.task(name="noop")
def noop(sent: float) -> None:
    RECORD.add(f"L {1000 * (time.time() - sent):.3f}\n")


@app.task(name="keyed", bind=True, max_retries=None)
def keyed(self, key: str, sent: float) -> None:
    r = RECORD.redis()
    lock = r.lock(f"lock:{key}", timeout=30)
    if not lock.acquire(blocking=False):
        raise self.retry(countdown=RETRY_S)
    try:
        taken = time.time()
        holders = r.incr(f"active:{key}")
        r.decr(f"active:{key}")
    finally:
        given = time.time()
        lock.release()
    overlap = " overlap" if holders > 1 else ""
    RECORD.add(f"L {1000 * (taken - sent):.3f}\nK {key} {taken:.6f} {given:.6f}{overlap}\n")
