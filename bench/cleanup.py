"""The cleanup part (R4, R1): what deleting finished work costs the paths users take, what one
finished task leaves on disk, and whether a constant load under a short window stops growing.

- ``backlog``: a backlog of finished keyed tasks (each with the attempt, the four history rows
  and the Idempotency-Key record a finished task leaves) is made, then the end-to-end load
  (batched submissions over 1,000 keys, SDK workers) runs with the cleanup deleting the
  backlog (window 0, as fast as it goes) and without it, alternated. Printed: tasks/s and a
  probe's claim p99 (an empty claim every 10 ms) side by side, rows deleted per second,
  deadlocks.
- ``bytes``: keyed tasks, each its own key, run through the API; InnoDB's data and index
  bytes per finished task, per table, counted over the tasks after a first 20,000: a new
  table's first pages come one by one and then a whole extent at a time, so its first
  megabytes count several hundred bytes more a task than the table's growth from then on.
- ``soak``: keyed tasks at a constant rate with a 60 s window and a cleanup pass every 10 s;
  rows of every table and the data files' size, per minute.
"""

from __future__ import annotations

import secrets
import threading
import time

from e2e import e2e
from engine_parts import Bench
from measures import lock_counters, lock_delta, pct

from orbit_shell.engine import db
from orbit_shell.sdk.client import Client
from orbit_shell.server import cleanup

GROWING = (
    "tasks",
    "attempts",
    "task_history",
    "idempotency_records",
    "concurrency_resources",
    "permits",
    "worker_sessions",
    "schedule_fires",
)


def make_backlog(bench: Bench, tasks: int) -> None:
    """``tasks`` finished keyed tasks of the bench namespace, finished an hour ago, made by
    set-based statements (a digits cross join) in chunks of 100,000."""
    conn = db.connect(bench.dsn)
    digits = "(SELECT 0 d UNION ALL " + " UNION ALL ".join(f"SELECT {i}" for i in range(1, 10))
    numbers = (
        f"SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n FROM "
        f"{digits}) a, {digits}) b, {digits}) c, {digits}) e, {digits}) f"
    )
    tag = secrets.token_hex(4)
    try:
        with conn.cursor() as cur:
            for start in range(0, tasks, 100_000):
                size = min(100_000, tasks - start)
                cur.execute(
                    "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                    "idempotency_key, handler, handler_version, payload_version, payload, "
                    "concurrency_key, priority, state, lane, max_attempts, attempts_used, "
                    "available_at, created_at, updated_at, finished_at, payload_bytes) "
                    "SELECT MD5(CONCAT(%s, n + %s)), %s, %s, %s, CONCAT('old-', %s, '-', n + %s), "
                    "'object.update', 'v1', 'v1', '{\"n\": 1}', CONCAT('old/', n + %s), 5, "
                    "'SUCCEEDED', NULL, 3, 1, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, "
                    "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, "
                    "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, 8 FROM (" + numbers + ") x WHERE n < %s",
                    (tag, start, bench.ns, bench.app, bench.queue, tag, start, start, size),
                )
                cur.execute(
                    "INSERT INTO idempotency_records (namespace_id, idempotency_key, fingerprint, "
                    "task_id, created_at) SELECT namespace_id, idempotency_key, REPEAT('f', 64), "
                    "id, created_at FROM tasks WHERE namespace_id = %s AND idempotency_key "
                    "LIKE %s AND id NOT IN (SELECT task_id FROM idempotency_records "
                    "WHERE namespace_id = %s)",
                    (bench.ns, f"old-{tag}-%", bench.ns),
                )
            cur.execute(
                "INSERT INTO attempts (public_id, task_id, namespace_id, application_id, "
                "queue_id, session_id, attempt_number, concurrency_token, state, "
                "lease_expires_at, outcome, created_at, started_at, finished_at) "
                "SELECT MD5(CONCAT('a', t.public_id)), t.id, t.namespace_id, t.application_id, "
                "t.queue_id, 0, 1, 1, 'SUCCEEDED', t.finished_at, 'succeeded', t.created_at, "
                "t.created_at, t.finished_at FROM tasks t WHERE t.namespace_id = %s "
                "AND t.idempotency_key LIKE %s",
                (bench.ns, f"old-{tag}-%"),
            )
            for event, before, after in (
                ("SUBMITTED", None, "WAITING"),
                ("CLAIMED", "WAITING", "LEASED"),
                ("STARTED", "LEASED", "RUNNING"),
                ("SUCCEEDED", "RUNNING", "SUCCEEDED"),
            ):
                cur.execute(
                    "INSERT INTO task_history (task_id, namespace_id, event, from_state, "
                    "to_state, actor, created_at) SELECT id, namespace_id, %s, %s, %s, "
                    "'bench', finished_at FROM tasks WHERE namespace_id = %s "
                    "AND idempotency_key LIKE %s",
                    (event, before, after, bench.ns, f"old-{tag}-%"),
                )
    finally:
        conn.close()


class ClaimProbe(threading.Thread):
    """An empty claim (a session of a queue nothing is submitted to) every 10 ms: the claim
    path's latency, which a cleanup's locks or I/O would lengthen."""

    def __init__(self, bench: Bench, url: str) -> None:
        super().__init__(daemon=True)
        self.client = Client(url, bench.token)
        queue = self.client.create_queue(f"probe-{secrets.token_hex(3)}").queue_id
        hello = self.client.request(
            "POST",
            "/v1/workers/hello",
            {
                "worker_id": f"probe-{secrets.token_hex(3)}",
                "queue_ids": [queue],
                "capacity": 1,
                "concurrency_keys": True,
            },
        )[1]
        self.path = f"/v1/workers/{hello['session_id']}/claim"
        self.ms: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.01):
            began = time.perf_counter()
            self.client.request("POST", self.path, {"max": 1, "wait_ms": 0})
            self.ms.append(1000 * (time.perf_counter() - began))


class Cleaning(threading.Thread):
    """The cleanup at window 0, paced at ``duty`` as the leader's pass is, counting rows and
    seconds."""

    def __init__(self, bench: Bench, duty: float) -> None:
        super().__init__(daemon=True)
        self.bench, self.duty = bench, duty
        self.rows = 0
        self.seconds = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        began = time.monotonic()

        def counted(table: str, rows: int) -> None:
            self.rows += rows

        def paced(seconds: float) -> None:
            if self.stopped.wait(seconds):  # the load is over: stop between two batches
                raise _Stopped

        try:
            while not self.stopped.is_set():
                done = cleanup.run_pass(
                    self.bench.db, self.bench.ns, duty=self.duty, sleep=paced, deleted=counted
                )
                if not done["tasks"]:
                    break  # the backlog is gone
        except _Stopped:
            pass
        self.seconds = time.monotonic() - began


class _Stopped(Exception):
    pass


def loaded(bench: Bench, url: str, clean: bool, tasks: int, duty: float) -> dict:
    """One e2e run (batches of 100 over 1,000 keys) with or without the cleanup beside it."""
    probe = ClaimProbe(bench, url)
    cleaner = Cleaning(bench, duty)
    locks = lock_counters(bench.db)
    probe.start()
    if clean:
        cleaner.start()
    run = e2e(bench, url, "cleanup", tasks, 1000, producers=4, workers=2, capacity=100, batch=100)
    probe.stopped.set()
    cleaner.stopped.set()
    probe.join(10)
    if clean:
        cleaner.join(600)
        # What the pass left when the load ended goes now, at full speed and untimed, so each
        # round (and the soak after them) starts from the same tables.
        cleanup.run_pass(bench.db, bench.ns, pause=0, duty=1)
    return {
        "tasks_per_s": run["tasks_per_s"],
        "claim_p50_ms": pct(probe.ms, 50),
        "claim_p99_ms": pct(probe.ms, 99),
        "rows_deleted": cleaner.rows,
        "rows_deleted_per_s": cleaner.rows / cleaner.seconds if cleaner.seconds else 0.0,
        **lock_delta(locks, lock_counters(bench.db)),
    }


def backlog(bench: Bench, url: str, finished: int, tasks: int, duty: float) -> dict:
    """The cleanup beside the load, alternated with the load alone: off, on, off, on."""
    bench.db.call("namespace_retention", bench.ns, 0, 0)
    rounds: dict[str, list[dict]] = {"off": [], "on": []}
    for mode in ("off", "on", "off", "on"):
        if mode == "off":  # the load alone over the backlog, which the next round deletes
            make_backlog(bench, finished)
        rounds[mode].append(loaded(bench, url, mode == "on", tasks, duty))
    best = {m: max(r, key=lambda x: x["tasks_per_s"]) for m, r in rounds.items()}
    return {
        "backlog": finished,
        "duty": duty,
        "rounds": rounds,
        "tasks_per_s_on_vs_off": best["on"]["tasks_per_s"] / best["off"]["tasks_per_s"],
        "claim_p99_on_vs_off": best["on"]["claim_p99_ms"] / best["off"]["claim_p99_ms"],
        "rows_deleted_per_s": max(r["rows_deleted_per_s"] for r in rounds["on"]),
        "deadlocks": sum(r["deadlocks"] for rs in rounds.values() for r in rs),
    }


def table_bytes(bench: Bench) -> dict[str, int]:
    """Data and index bytes of each growing table, after ANALYZE (InnoDB's own figures)."""
    out = {}
    conn = db.connect(bench.dsn)
    try:
        with conn.cursor() as cur:
            for table in GROWING:
                cur.execute(f"ANALYZE TABLE {table}")
                cur.fetchall()
                cur.execute(
                    "SELECT DATA_LENGTH + INDEX_LENGTH AS b FROM information_schema.TABLES "
                    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                    (table,),
                )
                out[table] = int(cur.fetchone()["b"])
    finally:
        conn.close()
    return out


def bytes_per_task(bench: Bench, url: str, tasks: int, warm: int = 20_000) -> dict:
    """``tasks`` keyed tasks, each its own key, through the API, after ``warm`` others; the
    tables' growth on disk per task over the ``tasks``."""
    e2e(bench, url, "bytes-warm", warm, warm, producers=4, workers=2, capacity=100, batch=100)
    before = table_bytes(bench)
    e2e(bench, url, "bytes", tasks, tasks, producers=4, workers=2, capacity=100, batch=100)
    after = table_bytes(bench)
    per = {t: (after[t] - before[t]) / tasks for t in GROWING}
    return {"tasks": tasks, "after": warm, "per_table": per, "total": sum(per.values())}


def soak(bench: Bench, url: str, seconds: float, rate: float, window: int = 60) -> dict:
    """Keyed tasks at ``rate``/s for ``seconds`` with a ``window`` and a pass every 10 s:
    rows per table and data bytes, each minute. The bound is rate x (window + interval) x 1.2
    rows of tasks (history: four a task)."""
    bench.db.call("namespace_retention", bench.ns, window, window)
    samples: list[dict] = []
    stop = threading.Event()

    def passes() -> None:
        while not stop.wait(10):
            cleanup.run_pass(bench.db, bench.ns)

    def sample() -> None:
        while not stop.wait(60):
            counts = {t: bench.db.query(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"] for t in GROWING}
            samples.append({"rows": counts, "bytes": sum(table_bytes(bench).values())})
            print(f"  soak minute {len(samples)}: {counts}, {samples[-1]['bytes']:,} bytes")

    threads = [threading.Thread(target=f, daemon=True) for f in (passes, sample)]
    for t in threads:
        t.start()
    e2e(
        bench,
        url,
        "soak",
        int(rate * seconds),
        int(rate * seconds),
        producers=2,
        workers=2,
        capacity=50,
        batch=1,
        rate=rate,
    )
    stop.set()
    # Rows a finished task leaves in each table (history: four events; a key row: its own key).
    per_task = {"tasks": 1, "attempts": 1, "task_history": 4, "idempotency_records": 1}
    per_task["concurrency_resources"] = 1
    bounds = {t: rate * (window + 10) * 1.2 * n for t, n in per_task.items()}
    most = {t: max((m["rows"][t] for m in samples), default=0) for t in GROWING}
    return {
        "rate": rate,
        "window_s": window,
        "minutes": samples,
        "row_bounds": bounds,
        "rows_max": most,
        "within_bounds": all(most[t] <= b for t, b in bounds.items()),
    }


def run_cleanup(
    bench: Bench, url: str, large: bool, soak_seconds: float = 300.0, duty: float = cleanup.DUTY
) -> dict:
    out = {
        "bytes": bytes_per_task(bench, url, 40_000),
        "backlog": backlog(bench, url, 1_000_000 if large else 100_000, 10_000, duty),
    }
    if soak_seconds > 0:  # --soak-seconds 0 leaves it out (a --large run of the backlog)
        out["soak"] = soak(bench, url, soak_seconds, 50.0)
    b = out["bytes"]
    print(
        f"cleanup: bytes per finished task {b['total']:.0f}, tasks {b['after']:,} to "
        f"{b['after'] + b['tasks']:,} ("
        + ", ".join(f"{t} {v:.0f}" for t, v in b["per_table"].items() if v)
        + ")",
        flush=True,
    )
    k = out["backlog"]
    print(
        f"cleanup: deleting a backlog of {k['backlog']:,} finished tasks beside the e2e load "
        f"(duty {k['duty']:g}): "
        f"tasks/s {k['tasks_per_s_on_vs_off']:.2f}x of the load alone (target >= 0.9), claim "
        f"p99 {k['claim_p99_on_vs_off']:.2f}x (target <= 1.5), {k['rows_deleted_per_s']:,.0f} "
        f"rows deleted/s, deadlocks {k['deadlocks']}",
        flush=True,
    )
    s = out.get("soak")
    if s is None:
        return out
    print(
        f"cleanup: soak at {s['rate']:.0f} tasks/s, window {s['window_s']} s: most rows "
        + ", ".join(
            f"{t} {s['rows_max'][t]:,} (bound {b:,.0f})" for t, b in s["row_bounds"].items()
        )
        + f" -> {'within' if s['within_bounds'] else 'OVER'} the bounds; bytes per minute "
        + ", ".join(f"{m['bytes']:,}" for m in s["minutes"]),
        flush=True,
    )
    return out
