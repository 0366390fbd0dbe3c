"""Orbit benchmarks. Every figure is measured in this one run; compare ratios.

Parts:
  ceiling    single-row UPDATE+COMMIT transactions/s at N connections (durable-commit limit)
  procedure  submit -> claim -> start -> result cycles/s calling the procedures from N threads
             (one application, then an application per thread; then batched); then the floor
             (bench/floor.py): the ceiling's UPDATE as a procedure, and the cheapest cycle
             that writes task, attempt and history rows, against the same ceiling
  phases     one thread, batches of 10 and 100: wall time and mariadbd CPU per phase (keys
             none, each task its own, or 1,000 shared behind a backlog)
  blocked    claim latency and rows read per claim with 0 / 10k (/ 100k / 1M) parked tasks;
             an unkeyed session's claim and probe with 0 / 10k (/ 100k) READY keyed tasks;
             the sweeper's rows read per lease after 1,000 leases lapse at once behind 0 / 10k
             (/ 100k) finished tasks, and what an empty claim and its probe read there
  e2e        HTTP producers + SDK worker processes + gunicorn: tasks/s, submit-to-start p50/p99,
             for unkeyed, 1,000 keys and 10 hot keys, unpaced and paced at the targets' rates;
             peak RSS of a gunicorn and an SDK worker
  peer       Orbit and Procrastinate drain the same jobs with one worker of concurrency 10
             (Orbit over HTTP and over the direct MySQL transport, each with prefetch 0/10/40)
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import floor  # noqa: E402
import slowdisk  # noqa: E402
import targets  # noqa: E402

from orbit_shell import auth, batches, db, localdb, schema  # noqa: E402
from orbit_shell.cli import admin  # noqa: E402
from orbit_shell.client import Client  # noqa: E402
from orbit_shell.db import Database  # noqa: E402
from orbit_shell.models import SubmitTaskRequest  # noqa: E402


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Bench:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.db = Database(dsn, pool_size=32)
        token, public_id, digest = auth.new_token()
        app = "bench-" + secrets.token_hex(4)
        [[row]] = self.db.call(
            "tenant_bootstrap",
            app,
            "bench",
            "ns",
            "q",
            public_id,
            digest,
            ",".join(auth.SCOPES),
            "bench",
        )
        self.token, self.queue_public = token, row["queue_id"]
        self.application = app
        self._worker_dsn: str | None = None
        self.ns, self.app = row["namespace_id"], row["application_id"]
        self.queue = self.db.query(
            "SELECT id FROM queues WHERE public_id = %s", (self.queue_public,)
        )[0]["id"]
        # Bench fixture: a lease that outlives a 1M-row park, so the busy key's holder is still
        # the holder when its release is timed.
        self.db.query("UPDATE queues SET lease_seconds = 3600 WHERE id = %s", (self.queue,))

    @property
    def worker_dsn(self) -> str:
        """The direct worker transport's (W9) DSN: the least-privilege account orbit-admin
        makes, reached over TCP like a worker on another host. Made on first use (the peer
        part), since it needs CREATE USER on the server."""
        if self._worker_dsn is None:
            with tempfile.TemporaryDirectory() as tmp:
                account = admin.worker_account(
                    self.dsn,
                    argparse.Namespace(
                        user="bench_worker",
                        host="127.0.0.1",
                        output=str(Path(tmp) / "w.json"),
                        application=self.application,
                        environment="bench",
                        namespace="ns",
                    ),
                )
            self._worker_dsn = account["dsn"]
        return self._worker_dsn

    def hello(
        self,
        d: Database,
        worker_id: str,
        capacity: int = 1,
        keys: bool = True,
        queue_public: str | None = None,
    ) -> str:
        """A session on one queue (the bench queue by default), keyed unless ``keys`` is
        False; returns its id."""
        [session], _ = d.call(
            "worker_hello",
            self.ns,
            self.app,
            worker_id,
            capacity,
            int(keys),
            json.dumps([queue_public or self.queue_public]),
            "0" * 64,
        )
        return session["session_id"]

    def submit(self, d: Database, idempotency_key: str, key: str = "") -> None:
        d.call(
            "task_submit",
            self.ns,
            self.queue,
            idempotency_key,
            "0" * 64,
            "noop",
            "v1",
            "v1",
            "{}",
            "",
            key,
            5,
            None,
            None,
            "bench",
            None,
            None,
            None,
        )

    # ---------------------------------------------------------------------------------------
    def ceiling(self, connections: int, seconds: float) -> float:
        conn = db.connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS bench_ceiling (id INT PRIMARY KEY, "
                "n BIGINT NOT NULL) ENGINE=InnoDB COMMENT='benchmark scratch'"
            )
            cur.execute(
                "REPLACE INTO bench_ceiling SELECT seq, 0 FROM (SELECT 0 AS seq"
                + "".join(f" UNION ALL SELECT {i}" for i in range(1, 64))
                + ") s"
            )
        conn.close()
        counts = [0] * connections
        stop = time.monotonic() + seconds

        def loop(i: int) -> None:
            c = db.connect(self.dsn)
            with c.cursor() as cur:
                while time.monotonic() < stop:
                    cur.execute("UPDATE bench_ceiling SET n = n + 1 WHERE id = %s", (i,))
                    counts[i] += 1
            c.close()

        run_threads(loop, connections)
        return sum(counts) / seconds

    def procedure_cycles(self, threads: int, seconds: float, app_per_thread: bool = False) -> dict:
        """The single-call cycle from ``threads`` threads, all in this bench's application, or
        each in an application of its own (``app_per_thread``: no row shared between threads,
        like the ceiling's; every writer of one application takes its row first)."""
        tenants = [Bench(self.dsn) for _ in range(threads)] if app_per_thread else [self]
        done = [0] * threads
        calls = [0] * threads
        stop = time.monotonic() + seconds

        def loop(i: int) -> None:
            b = tenants[i % len(tenants)]
            d = Database(self.dsn, pool_size=1)
            sid = b.hello(d, f"proc-{i}-{secrets.token_hex(3)}")
            while time.monotonic() < stop:
                b.submit(d, secrets.token_hex(12), "")
                [rows] = d.call("worker_claim", b.ns, sid, 1)
                calls[i] += 2
                for r in rows:
                    d.call("attempt_start", b.ns, sid, r["attempt_id"])
                    d.call("attempt_result", b.ns, sid, r["attempt_id"], "succeeded", 0, None, None)
                    calls[i] += 2
                    done[i] += 1
            d.close()

        locks = lock_counters(self.db)
        run_threads(loop, threads)
        tasks = sum(done)
        return {
            "tasks_per_s": tasks / seconds,
            "commits_per_task": sum(calls) / max(tasks, 1),
            **lock_delta(locks, lock_counters(self.db)),
        }

    def batch_queue(self, d: Database, name: str, capacity: int) -> tuple[int, str]:
        """A queue of its own and a keyed session of ``capacity`` on it: (queue id, session)."""
        [[made]] = d.call("queue_create", self.ns, self.app, name, None, None, 3, 3600, 1, 300)
        [queue] = d.query("SELECT id FROM queues WHERE public_id = %s", (made["queue_id"],))
        return queue["id"], self.hello(d, name, capacity, queue_public=made["queue_id"])

    @staticmethod
    def batch_items(queue: int, count: int, keys=None) -> str:
        """task_submit_many's items: new no-op tasks; ``keys`` gives each task's concurrency
        key (an iterator), none when it is None."""
        return json.dumps(
            [
                {
                    "queue": queue,
                    "idempotency_key": secrets.token_hex(12),
                    "fingerprint": "0" * 64,
                    "handler": "noop",
                    "handler_version": "v1",
                    "payload_version": "v1",
                    "payload": "{}",
                    "business_key": "",
                    "concurrency_key": next(keys) if keys else "",
                    "priority": 5,
                    "max_attempts": 0,
                    "deadline_seconds": 0,
                }
                for _ in range(count)
            ]
        )

    @staticmethod
    def batch_results(attempt_ids: list[str]) -> str:
        return json.dumps(
            [
                {"attempt_id": a, "outcome": "succeeded", "retryable": 0, "result": "", "error": ""}
                for a in attempt_ids
            ]
        )

    def phases(self, rounds: int, keys: str, batch: int = 10) -> dict:
        """One thread, batches of ``batch`` on an otherwise idle server: per phase (submit,
        claim, start, result) the wall time and the CPU mariadbd spent, per 10 tasks. The CPU
        is what a phase costs the database on a busy machine; the wall time adds the commit's
        wait. Batch sizes side by side split a batch's fixed cost from its cost per task.

        ``keys``: "none" (unkeyed), "own" (each task a key of its own, never seen before) or
        "shared" (1,000 keys in turn behind a backlog of 10 tasks a key: every submission
        parks, every result frees a key and promotes its next task, as in the e2e run)."""
        d = Database(self.dsn, pool_size=1)
        queue, sid = self.batch_queue(d, f"phases-{secrets.token_hex(3)}", batch)
        prefix = secrets.token_hex(4)
        if keys == "none":
            names = None
        elif keys == "own":
            names = (f"{prefix}-{n}" for n in itertools.count())
        else:
            names = (f"{prefix}-{n % 1000}" for n in itertools.count())
            for _ in range(0, 10_000, 100):
                d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 100, names))
        wall = dict.fromkeys(("submit", "claim", "start", "result"), 0.0)
        cpu = dict(wall)
        pids = mariadbd_pids()
        for n in range(rounds + 5):  # the first five warm the caches and are not counted
            marks = []
            for phase in wall:
                c0, t0 = db_cpu_seconds(pids), time.perf_counter()
                if phase == "submit":
                    items = self.batch_items(queue, batch, names)
                    d.call("task_submit_many", self.ns, "bench", items)
                elif phase == "claim":
                    [rows] = d.call("worker_claim", self.ns, sid, batch)
                    ids = [r["attempt_id"] for r in rows]
                elif phase == "start":
                    d.call("attempt_start_many", self.ns, sid, json.dumps(ids), 0)
                else:
                    d.call("attempt_result_many", self.ns, sid, self.batch_results(ids))
                marks.append((phase, time.perf_counter() - t0, db_cpu_seconds(pids) - c0))
            if n >= 5:
                for phase, w, c in marks:
                    wall[phase] += w
                    cpu[phase] += c
        d.close()
        per10 = 1000 * 10 / (rounds * batch)
        return {
            "keys": keys,
            "batch": batch,
            "wall_ms_per_10": {k: v * per10 for k, v in wall.items()},
            "db_cpu_ms_per_10": {k: v * per10 for k, v in cpu.items()},
        }

    def submit_repeated_keys(self, rounds: int, batch: int = 100, keys: int = 10) -> dict:
        """One thread: submissions of ``batch`` tasks naming ``keys`` keys (new ones each
        round), each key named by several items, the e2e hot-keys run's shape. Wall time and mariadbd CPU per 10 tasks, as in
        ``phases``."""
        d = Database(self.dsn, pool_size=1)
        queue, _ = self.batch_queue(d, f"repeat-{secrets.token_hex(3)}", 1)
        wall = cpu = 0.0
        pids = mariadbd_pids()
        for n in range(rounds + 3):  # the first three warm the caches and are not counted
            prefix = secrets.token_hex(4)
            names = (f"{prefix}-{i % keys}" for i in itertools.count())
            items = self.batch_items(queue, batch, names)
            c0, t0 = db_cpu_seconds(pids), time.perf_counter()
            d.call("task_submit_many", self.ns, "bench", items)
            if n >= 3:
                wall += time.perf_counter() - t0
                cpu += db_cpu_seconds(pids) - c0
        d.close()
        per10 = 1000 * 10 / (rounds * batch)
        return {"batch": batch, "keys": keys, "wall_ms_per_10": wall * per10,
                "db_cpu_ms_per_10": cpu * per10}  # fmt: skip

    def batch_cycle(self, call, queue: int, sid: str, batch: int) -> list[str]:
        """One round of the batch cycle through ``call(procedure, *args)``: submit ``batch``
        no-op tasks, claim up to ``batch``, start and report what was claimed (nothing when
        the claim came back empty). Returns the claimed attempts' ids."""
        call("task_submit_many", self.ns, "bench", self.batch_items(queue, batch))
        [rows] = call("worker_claim", self.ns, sid, batch)[:1]
        ids = [r["attempt_id"] for r in rows]
        if ids:
            call("attempt_start_many", self.ns, sid, json.dumps(ids), 0)
            call("attempt_result_many", self.ns, sid, self.batch_results(ids))
        return ids

    def procedure_batched(self, threads: int, seconds: float, batch: int = 10) -> dict:
        """The same cycle through the batch procedures: task_submit_many, worker_claim of
        ``batch``, attempt_start_many, attempt_result_many; one commit per call. Each thread
        has its own queue: on one shared queue the fair share (W2) splits every claim with the
        sessions that are between claims, and the cycle would measure that instead."""
        done = [0] * threads
        calls = [0] * threads
        stop = time.monotonic() + seconds

        def loop(i: int) -> None:
            d = Database(self.dsn, pool_size=1)
            queue, sid = self.batch_queue(d, f"procb-{i}-{secrets.token_hex(3)}", batch)

            def call(procedure: str, *args):
                calls[i] += 1
                return d.call(procedure, *args)

            while time.monotonic() < stop:
                done[i] += len(self.batch_cycle(call, queue, sid, batch))
            d.close()

        locks = lock_counters(self.db)
        run_threads(loop, threads)
        tasks = sum(done)
        return {
            "batch": batch,
            "tasks_per_s": tasks / seconds,
            "commits_per_task": sum(calls) / max(tasks, 1),
            **lock_delta(locks, lock_counters(self.db)),
        }

    def blocked(self, parked: int, samples: int) -> dict:
        key = "hot-" + secrets.token_hex(4)
        d = Database(self.dsn, pool_size=2)
        holder = self.hello(d, "holder-" + key)
        self.submit(d, key, key)
        [[held]] = d.call("worker_claim", self.ns, holder, 1)
        d.call("attempt_start", self.ns, holder, held["attempt_id"])
        if parked:
            park(self.dsn, self.ns, self.app, self.queue, key, parked)
        sid = self.hello(d, "claimer-" + key)
        conn = db.connect(self.dsn)
        latencies, reads = [], []
        for i in range(samples):
            self.submit(d, f"{key}-{i}", f"{key}-free-{i}")
            ms, read, rows = self.timed_claim(conn, d, sid)
            latencies.append(ms)
            reads.append(read)
            assert rows, "a claimable task was hidden"
        # The busy key's release promotes the next of its parked tasks (key_promote_next).
        started = time.perf_counter()
        d.call("attempt_result", self.ns, holder, held["attempt_id"], "succeeded", 0, None, None)
        release_ms = (time.perf_counter() - started) * 1000
        conn.close()
        d.close()
        return {
            "parked": parked,
            "claim_p50_ms": pct(latencies, 50),
            "claim_p99_ms": pct(latencies, 99),
            "rows_read_per_claim": statistics.median(reads),
            "release_of_busy_key_ms": release_ms,
        }

    def sweep(self, history: int, expired: int) -> dict:
        """The sweeper after a mass expiry: ``expired`` leases (held by sessions whose workers
        are gone) lapse at once behind ``history`` tasks finished on the same queue first;
        lease_sweep(500) runs until none is left (no server runs meanwhile). The leases are
        moved into the past in one UPDATE, a fixture like the bulk park."""
        d = Database(self.dsn, pool_size=1)
        name = f"sweep-{secrets.token_hex(3)}"
        queue, worker = self.batch_queue(d, name, 100)
        [public] = d.query("SELECT public_id FROM queues WHERE id = %s", (queue,))
        for _ in range(0, history, 100):
            d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 100))
            [rows] = d.call("worker_claim", self.ns, worker, 100)[:1]
            ids = [r["attempt_id"] for r in rows]
            batches.start_many(d, self.ns, worker, ids)
            outcomes = [{"attempt_id": a, "outcome": "succeeded"} for a in ids]
            batches.result_many(d, self.ns, worker, outcomes)
        d.call("worker_goodbye", self.ns, worker)  # an idle open session takes a fair share
        # What an empty claim and its probe read on a queue with that history: the recovery
        # guard's and the probe's look for expired leases and due backoff.
        conn = db.connect(self.dsn)
        idle = self.hello(d, f"{name}-idle", 10, queue_public=public["public_id"])
        _, claim_reads, granted = counted_call(conn, "worker_claim", self.ns, idle, 10)
        _, probe_reads, [ready] = counted_call(conn, "session_ready", self.ns, idle)
        assert not granted and not ready["ready"], (granted, ready)
        d.call("worker_goodbye", self.ns, idle)
        sessions = []
        for n in range(0, expired, 100):
            d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 100))
            sessions.append(
                self.hello(d, f"{name}-gone-{n}", 100, queue_public=public["public_id"])
            )
            [rows] = d.call("worker_claim", self.ns, sessions[-1], 100)[:1]
            assert len(rows) == 100, len(rows)
        d.query(
            "UPDATE attempts a JOIN worker_sessions s ON s.id = a.session_id "
            "SET a.lease_expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND "
            f"WHERE s.public_id IN ({', '.join(['%s'] * len(sessions))})",
            sessions,
        )
        recovered, reads, ms = 0, 0, 0.0
        while True:
            spent, read, [row] = counted_call(conn, "lease_sweep", 500)
            ms += spent
            reads += read
            if not row["recovered"]:
                break
            recovered += row["recovered"]
        conn.close()
        d.close()
        assert recovered >= expired, recovered
        return {
            "history": history,
            "expired": expired,
            "recovered": recovered,
            "rows_read_per_lease": reads / recovered,
            "empty_claim_rows_read": claim_reads,
            "probe_rows_read": probe_reads,
            "ms_per_lease": ms / recovered,
        }

    def timed_claim(self, conn, d: Database, sid: str) -> tuple[float, int, list[dict]]:
        """A claim of one on ``conn`` (its own connection, for its handler counters): its
        milliseconds, the rows it read and what it granted, which is then started and
        finished through ``d``."""
        ms, reads, rows = counted_call(conn, "worker_claim", self.ns, sid, 1)
        for row in rows:
            d.call("attempt_start", self.ns, sid, row["attempt_id"])
            d.call("attempt_result", self.ns, sid, row["attempt_id"], "succeeded", 0, None, None)
        return ms, reads, rows

    def unkeyed_claims(self, ready_keyed: int, samples: int) -> dict:
        """A session without concurrency_keys (W2: unkeyed tasks only) claiming one task at a
        time, and probing an empty queue, while ``ready_keyed`` keyed tasks wait READY on the
        same queue, each the candidate of its own free key (its keyed workers busy elsewhere)."""
        d = Database(self.dsn, pool_size=1)
        queue, _ = self.batch_queue(d, f"unkeyed-{secrets.token_hex(3)}", 1)
        [public] = d.query("SELECT public_id FROM queues WHERE id = %s", (queue,))
        prefix = secrets.token_hex(4)
        names = (f"{prefix}-{n}" for n in itertools.count())
        for _ in range(0, ready_keyed, 100):
            d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 100, names))
        sid = self.hello(d, "plain-" + prefix, keys=False, queue_public=public["public_id"])
        conn = db.connect(self.dsn)
        claims, probes, reads = [], [], []
        for _ in range(samples):
            d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 1))
            ms, read, rows = self.timed_claim(conn, d, sid)
            claims.append(ms)
            reads.append(read)
            assert len(rows) == 1 and rows[0]["concurrency_key"] == "", rows
            started = time.perf_counter()
            [[probe]] = d.call("session_ready", self.ns, sid)
            probes.append((time.perf_counter() - started) * 1000)
            assert probe["ready"] == 0, "the probe saw work an unkeyed session may not take"
        conn.close()
        d.close()
        return {
            "ready_keyed": ready_keyed,
            "claim_p50_ms": pct(claims, 50),
            "claim_p99_ms": pct(claims, 99),
            "probe_p50_ms": pct(probes, 50),
            "rows_read_per_claim": statistics.median(reads),
        }

    def purge_lag(self, churned: int, samples: int = 50) -> dict:
        """Claims of 10 on a queue through which ``churned`` tasks were claimed and finished
        while a read view stayed open (a long transaction elsewhere on the server, such as
        ``mysqldump --single-transaction``): InnoDB's purge may not remove what that view
        could still read, so every claimed task's entry in ix_tasks_claim stays,
        delete-marked, at the head of (queue, READY), and each claim steps over them all. The
        handler counters do not count those steps; the time and the history list length show
        them. The view is then closed and purge given up to a minute to catch up."""
        d = Database(self.dsn, pool_size=1)
        queue, drainer = self.batch_queue(d, f"purge-{secrets.token_hex(3)}", 100)
        [public] = d.query("SELECT public_id FROM queues WHERE id = %s", (queue,))
        view = db.connect(self.dsn)
        conn = db.connect(self.dsn)
        try:
            if churned:
                with view.cursor() as cur:
                    cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            done = 0
            while done < churned:
                done += len(self.batch_cycle(d.call, queue, drainer, 100))
            d.call("worker_goodbye", self.ns, drainer)  # an idle open session takes a share
            sid = self.hello(
                d, f"purge-claimer-{secrets.token_hex(3)}", 10, queue_public=public["public_id"]
            )
            latencies, reads = [], []
            for _ in range(samples):
                d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 10))
                ms, read, rows = counted_call(conn, "worker_claim", self.ns, sid, 10)
                latencies.append(ms)
                reads.append(read)
                assert len(rows) == 10, len(rows)
                ids = [r["attempt_id"] for r in rows]
                d.call("attempt_start_many", self.ns, sid, json.dumps(ids), 0)
                d.call("attempt_result_many", self.ns, sid, self.batch_results(ids))
            unpurged = history_length(conn)
        finally:
            view.close()  # ends the view's transaction
            deadline = time.monotonic() + 60
            while history_length(conn) > 1000 and time.monotonic() < deadline:
                time.sleep(0.5)
            conn.close()
            d.close()
        return {
            "churned": done,
            "claim_p50_ms": pct(latencies, 50),
            "claim_p99_ms": pct(latencies, 99),
            "rows_read_per_claim": statistics.median(reads),
            "history_list_length": unpurged,
        }


def history_length(conn) -> int:
    """InnoDB's history list length: undo logs purge has not processed yet."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT `count` AS n FROM information_schema.INNODB_METRICS "
            "WHERE name = 'trx_rseg_history_len'"
        )
        row = cur.fetchone()
    return int(row["n"]) if row else -1


def server_settings(d: Database) -> dict[str, str]:
    """What makes a commit cost what it costs, recorded with the figures."""
    [row] = d.query(
        "SELECT @@version AS version, @@log_bin AS log_bin, @@sync_binlog AS sync_binlog, "
        "@@binlog_format AS binlog_format, "
        "@@innodb_flush_log_at_trx_commit AS innodb_flush_log_at_trx_commit"
    )
    return {k: str(v) for k, v in row.items()}


def lock_counters(d: Database) -> dict[str, int]:
    """The server's deadlocks and row-lock waits so far (global InnoDB counters)."""
    rows = d.query(
        "SHOW GLOBAL STATUS WHERE Variable_name IN "
        "('Innodb_deadlocks', 'Innodb_row_lock_waits', 'Innodb_row_lock_time')"
    )
    return {r["Variable_name"].lower(): int(r["Value"]) for r in rows}


def lock_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Deadlocks, row-lock waits and the milliseconds waited between two readings."""
    return {
        "deadlocks": after["innodb_deadlocks"] - before["innodb_deadlocks"],
        "row_lock_waits": after["innodb_row_lock_waits"] - before["innodb_row_lock_waits"],
        "row_lock_wait_ms": after["innodb_row_lock_time"] - before["innodb_row_lock_time"],
    }


def locks_text(part: dict) -> str:
    return f"deadlocks {part['deadlocks']}, row-lock waits {part['row_lock_waits']}"


def handler_reads(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(r["Value"]) for r in cur.fetchall())


def counted_call(conn, procedure: str, *args) -> tuple[float, int, list[dict]]:
    """CALL ``procedure`` on ``conn`` (a connection of its own, for its handler counters):
    its milliseconds, the rows it read and its first result set."""
    before = handler_reads(conn)
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(f"CALL {procedure}({', '.join(['%s'] * len(args))})", args)
        rows = list(cur.fetchall())
        while cur.nextset():
            pass
    ms = (time.perf_counter() - started) * 1000
    return ms, handler_reads(conn) - before, rows


def park(dsn: str, ns: int, app: int, queue: int, key: str, count: int) -> None:
    """Bench fixture: insert `count` tasks parked behind `key` in bulk (the state task_submit
    leaves them in), because submitting a million through the procedure would dominate the run.
    Priority 9 (the last): once the key is released, a promoted one never displaces the tasks
    whose claims the next sizes time."""
    conn = db.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE digits (d INT) ENGINE=MEMORY")
        cur.execute("INSERT INTO digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)")
        # A temporary table cannot be opened twice in one statement: three copies of 0-9.
        for copy in ("digits2", "digits3"):
            cur.execute(f"CREATE TEMPORARY TABLE {copy} LIKE digits")
            cur.execute(f"INSERT INTO {copy} SELECT * FROM digits")
        cur.execute("CREATE TEMPORARY TABLE seq (n INT PRIMARY KEY) ENGINE=MEMORY")
        cur.execute(
            "INSERT INTO seq SELECT a.d + 10 * b.d + 100 * c.d FROM digits a, digits2 b, digits3 c"
        )
        done = 0
        while done < count:
            batch = min(1000, count - done)
            cur.execute(
                "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                "idempotency_key, handler, handler_version, payload_version, payload, "
                "concurrency_key, priority, state, lane, max_attempts, available_at, created_at, "
                "updated_at) SELECT LOWER(REPLACE(UUID(), '-', '')), %s, %s, %s, "
                "CONCAT(%s, '-p-', %s + n), 'noop', 'v1', 'v1', '{}', %s, 9, 'WAITING', "
                "'BLOCKED', 3, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) "
                "FROM seq WHERE n < %s",
                (ns, app, queue, key, done, key, batch),
            )
            done += batch
    conn.close()


def run_threads(fn, n: int) -> None:
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# End to end ---------------------------------------------------------------------------------


def start_server(dsn: str, workers: int):
    port = localdb.free_port()
    env = dict(
        os.environ,
        ORBIT_MYSQL_DSN=dsn,
        ORBIT_HTTP_ADDR=f"127.0.0.1:{port}",
        ORBIT_HTTP_WORKERS=str(workers),
        # The per-credential submission limit is a policy knob, not what is measured: once
        # submission got cheaper, the peer part's queueing ran into it (429) and its producers
        # died. Off for the bench server.
        ORBIT_SUBMIT_RATE="0",
    )
    log = open(ROOT / ".scratch" / "bench-server.log", "w")  # noqa: SIM115 - lives with the server
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("orbit"))], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            import urllib.request

            urllib.request.urlopen(url + "/readyz", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("orbit did not start; see .scratch/bench-server.log")


def mariadbd_pids() -> list[int]:
    """The local mariadbd processes (the bench's private server, or the one a DSN names)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and b"mariadbd" in (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def db_cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(stat[11]) + int(stat[12])
    return total / os.sysconf("SC_CLK_TCK")


def cpu_sample() -> tuple[float, float, float]:
    """(busy, total) CPU seconds of the machine from /proc/stat, and CPU seconds used so far by
    mariadbd processes: the e2e part reports how busy the two cores were, and how much of it
    was the database, so a lock-bound run is told apart from a CPU-bound one."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick, db_cpu_seconds(mariadbd_pids())


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def e2e(
    bench: Bench,
    url: str,
    name: str,
    tasks: int,
    keys: int,
    producers: int,
    workers: int,
    capacity: int,
    drain: bool = False,
    batch: int = 50,
    prefetch: int = 0,
    direct: bool = False,
    rate: float = 0.0,
    claim_with_report: bool = True,
) -> dict:
    """Producers and SDK worker processes together; with ``drain`` the tasks are all submitted
    first and the clock starts when the workers do (the peer's way of measuring). Producers
    send ``batch`` tasks per request (POST /v1/tasks/batch; 1 = POST /v1/tasks each), at
    ``rate`` tasks/s in all when it is set (the submit-to-start latency of a queue that keeps
    up, where an unpaced run measures the backlog the producers build)."""
    client = Client(url, bench.token)
    queue = client.create_queue(f"e2e-{name}-{secrets.token_hex(3)}", lease_seconds=30).queue_id
    client.close()
    env = dict(
        os.environ,
        ORBIT_URL=url,
        ORBIT_TOKEN=bench.token,
        QUEUE_IDS=queue,
        CAPACITY=str(capacity),
        PREFETCH=str(prefetch),
        CLAIM_WITH_REPORT="1" if claim_with_report else "0",
    )
    if direct:  # the SDK workers call the procedures over MySQL (W9) instead of HTTP
        env.update(
            ORBIT_WORKER_DSN=bench.worker_dsn,
            ORBIT_APPLICATION=bench.application,
            ORBIT_ENVIRONMENT="bench",
            ORBIT_NAMESPACE="ns",
        )

    def spawn_workers():
        return [
            subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "noop_worker.py")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(workers)
        ]

    procs = [] if drain else spawn_workers()
    spawned = time.monotonic()
    time.sleep(0 if drain else 1.0)
    started = time.monotonic()
    cpu_before = cpu_sample()
    locks_before = lock_counters(bench.db)

    def produce(i: int) -> None:
        c = Client(url, bench.token)
        mine = [
            (
                f"{name}-{queue}-{n}",
                SubmitTaskRequest(
                    queue_id=queue,
                    handler="noop",
                    handler_version="v1",
                    payload_version="v1",
                    payload={"n": n},
                    concurrency_key=f"{name}-{queue}-{n % keys}" if keys else None,
                ),
            )
            for n in range(i, tasks, producers)
        ]
        for k, at in enumerate(range(0, len(mine), batch)):
            if rate:  # this producer's k-th request, interleaved with the others' at ``rate``
                due = started + (k * producers + i) * batch / rate
                time.sleep(max(0.0, due - time.monotonic()))
            if batch == 1:
                c.submit_task(*mine[at])
                continue
            refused = [r for r in c.submit_tasks(mine[at : at + batch]) if isinstance(r, Exception)]
            if refused:
                raise RuntimeError(f"submissions refused: {refused[:3]}")
        c.close()

    run_threads(produce, producers)
    submit_s = time.monotonic() - started
    if drain:
        procs = spawn_workers()
        spawned = started = time.monotonic()  # until the worker says it is ready (below)
    [row] = bench.db.query("SELECT id FROM queues WHERE public_id = %s", (queue,))
    # Done when the queue's unfinished count (one row by primary key) reaches 0; every task
    # is submitted by now. Counting the queue's SUCCEEDED tasks instead read every task of the
    # queue each poll: 1.4-3.7 ms of the server's CPU every 10 ms, taken from the drain it timed.
    while True:
        [left] = bench.db.query("SELECT unfinished_tasks FROM queues WHERE id = %s", (row["id"],))
        if left["unfinished_tasks"] == 0 or time.monotonic() - started > 600:
            break
        time.sleep(0.01 if drain else 0.05)
    finished = time.monotonic()
    cpu_after = cpu_sample()
    locks = lock_delta(locks_before, lock_counters(bench.db))
    [done] = bench.db.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE queue_id = %s AND state = 'SUCCEEDED'", (row["id"],)
    )
    total = cpu_after[1] - cpu_before[1]
    lat = bench.db.query(
        "SELECT TIMESTAMPDIFF(MICROSECOND, t.created_at, a.started_at) / 1000 AS ms FROM tasks t "
        "JOIN attempts a ON a.task_id = t.id WHERE t.queue_id = %s AND a.started_at IS NOT NULL",
        (row["id"],),
    )
    ms = [float(r["ms"]) for r in lat]
    rss: list[int] = []
    readies: list[float] = []
    cpu_s = 0.0
    sizes: dict[str, tuple[int, int, float]] = {}
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        out, _ = p.communicate(timeout=30)
        for line in out.splitlines():
            field, _, value = line.partition("=")
            if field == "rss_kib":
                rss.append(int(value))
            elif field == "ready":
                readies.append(float(value))
            elif field == "cpu_s":
                cpu_s += float(value)
            elif field.startswith("calls_"):
                calls, items, seconds = value.split(",")
                was = sizes.get(field[6:], (0, 0, 0.0))
                sizes[field[6:]] = (
                    was[0] + int(calls),
                    was[1] + int(items),
                    was[2] + float(seconds),
                )
    startup = min(readies, default=spawned) - spawned
    if drain:
        # The peer's clock starts with its app open and its worker about to run; this one
        # starts when the first worker process has imported, connected and is about to run,
        # not at its spawn (Python's start-up and imports are not draining).
        started = max(started, spawned + startup)
    elapsed = finished - started
    return {
        "scenario": name,
        "submit_batch": batch,
        "capacity": capacity,
        "prefetch": prefetch,
        "claim_with_report": claim_with_report,
        "transport": "mysql" if direct else "http",
        "worker_startup_s": startup,
        "paced_submit_per_s": rate,
        "tasks": tasks,
        "keys": keys,
        "completed": done["n"],
        "tasks_per_s": done["n"] / elapsed,
        "submit_per_s": tasks / submit_s,
        "submit_to_start_p50_ms": pct(ms, 50),
        "submit_to_start_p99_ms": pct(ms, 99),
        "sdk_worker_peak_rss_mib": max(rss, default=0) / 1024,
        # The SDK workers' own CPU (after start-up) per task: the client's share of a round.
        "sdk_worker_cpu_ms_per_task": 1000 * cpu_s / done["n"] if done["n"] else 0.0,
        "worker_requests": {k: c for k, (c, _, _) in sizes.items()},
        "attempts_per_request": {k: i / c for k, (c, i, _) in sizes.items() if c},
        "request_ms": {k: 1000 * s / c for k, (c, _, s) in sizes.items() if c},
        "cpu_busy_pct": 100 * (cpu_after[0] - cpu_before[0]) / total if total else 0.0,
        "mariadbd_cpu_pct": 100 * (cpu_after[2] - cpu_before[2]) / total if total else 0.0,
        **locks,
    }


def peer(bench: Bench, url: str, jobs: int, rounds: int = 3) -> dict:
    """Orbit and Procrastinate drain the same no-op jobs with one worker of concurrency 10, in
    the same run; unkeyed, and over 1,000 keys (Procrastinate's `lock`).

    A drain of 2,000 no-op jobs lasts seconds, and one drain of either side moved by half from
    one run to the next on this shared machine. Unkeyed, Procrastinate and Orbit's ways
    without prefetch therefore drain ``rounds`` times, alternating, and each figure is the
    median of its rounds (each round's rate is kept in the results; the per-request figures
    are the last round's); the ways with prefetch drain once, in the first round. Over 1,000
    keys Procrastinate takes about a minute a drain and Orbit leads it many times over: one
    round."""
    try:
        import peer_procrastinate
    except ImportError as exc:
        print(f"peer: skipped ({exc}); pip install 'procrastinate[psycopg]'", flush=True)
        return {"skipped": str(exc)}
    out = {}
    # Orbit's worker: over HTTP or the direct MySQL transport; without prefetch, one batch
    # ahead (10), and 4x its concurrency ahead (40, Celery's default prefetch multiplier).
    # Each reports and claims in one call; mysql_apart is the direct way without prefetch
    # reporting and claiming in separate calls (claim_with_report=False).
    ways = {
        f"{transport}{f'_prefetch{ahead}' if ahead else ''}": (transport == "mysql", ahead, True)
        for transport in ("http", "mysql")
        for ahead in (0, 10, 40)
    }
    ways["mysql_apart"] = (True, 0, False)
    for keys in (0, 1000):
        theirs: list[float] = []
        mine: dict[str, list[dict]] = {way: [] for way in ways}
        for n in range(rounds if keys == 0 else 1):
            theirs.append(peer_procrastinate.run(jobs, keys, 10)["jobs_per_s"])
            for way, (direct, prefetch, together) in ways.items():
                if n and prefetch:
                    continue
                mine[way].append(
                    e2e(
                        bench,
                        url,
                        f"drain{keys}-{way}",
                        jobs,
                        keys,
                        producers=8,
                        workers=1,
                        capacity=10,
                        drain=True,
                        prefetch=prefetch,
                        direct=direct,
                        claim_with_report=together,
                    )
                )
        peer_rate = statistics.median(theirs)
        per_round = {way: [r["tasks_per_s"] for r in runs] for way, runs in mine.items()}
        rates = {way: statistics.median(r) for way, r in per_round.items()}
        ratios = {way: rate / peer_rate for way, rate in rates.items()}
        last = {way: runs[-1] for way, runs in mine.items()}
        out[f"keys{keys}"] = {
            "procrastinate_jobs_per_s": peer_rate,
            "orbit_tasks_per_s": rates,
            "rounds": {"procrastinate_jobs_per_s": theirs, "orbit_tasks_per_s": per_round},
            "orbit_attempts_per_request": {
                way: r["attempts_per_request"] for way, r in last.items()
            },
            "orbit_request_ms": {way: r["request_ms"] for way, r in last.items()},
            "orbit_worker_startup_s": {way: r["worker_startup_s"] for way, r in last.items()},
            "orbit_worker_cpu_ms_per_task": {
                way: r["sdk_worker_cpu_ms_per_task"] for way, r in last.items()
            },
            "ratio": ratios,
        }
        if len(theirs) > 1:
            print(
                f"peer keys={keys}, {len(theirs)} rounds: Procrastinate "
                + " / ".join(f"{r:.0f}" for r in theirs)
                + "; Orbit "
                + ", ".join(
                    f"{way} " + " / ".join(f"{r:.0f}" for r in rs)
                    for way, rs in per_round.items()
                    if len(rs) > 1
                ),
                flush=True,
            )
        print(
            f"peer keys={keys}: Procrastinate {peer_rate:.0f}/s; Orbit "
            + ", ".join(f"{way} {rates[way]:.0f}/s ({ratios[way]:.2f}x)" for way in ways)
            + f" (target >= {10 if keys else 2.5}x"
            + (", medians of the rounds)" if len(theirs) > 1 else ")"),
            flush=True,
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--large", action="store_true", help="100k and 1M parked, longer runs")
    parser.add_argument(
        "--only", choices=["ceiling", "procedure", "phases", "blocked", "e2e", "peer"], nargs="*"
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--binlog",
        action="store_true",
        help="private server with binary logging synced per commit (MySQL 8's default)",
    )
    parser.add_argument(
        "--flush-delay-ms",
        type=float,
        default=0.0,
        help="private server whose every flush returns this much later (an emulated disk "
        "without a write cache; bench/slowdisk.py)",
    )
    parser.add_argument(
        "--capacity", type=int, default=100, help="capacity of each e2e SDK worker process"
    )
    parser.add_argument(
        "--batch", type=int, default=100, help="tasks per submission request of the e2e producers"
    )
    args = parser.parse_args()
    if not 1 <= args.threads <= 64:
        parser.error("--threads must be 1-64 (the ceiling updates one of 64 rows per thread)")
    parts = set(args.only or ["ceiling", "procedure", "phases", "blocked", "e2e", "peer"])
    seconds = 20.0 if args.large else 8.0

    own = None
    dsn = os.environ.get("ORBIT_MYSQL_DSN")
    if not 0 <= args.flush_delay_ms <= 1000:
        parser.error("--flush-delay-ms must be 0-1000")
    if dsn and (args.binlog or args.flush_delay_ms):
        parser.error(
            "--binlog and --flush-delay-ms set up the private server; "
            "ORBIT_MYSQL_DSN names one as it is"
        )
    if not dsn:
        name = "bench-db" + ("-binlog" if args.binlog else "")
        extra = {}
        if args.flush_delay_ms:
            name += "-slowflush"
            try:
                extra = slowdisk.environment(ROOT / ".scratch", args.flush_delay_ms)
            except slowdisk.SlowDiskError as exc:
                parser.error(str(exc))
        own = localdb.PrivateServer(
            ROOT / ".scratch" / name,
            localdb.ensure_binaries(),
            binlog=args.binlog,
            environment=extra,
        )
        if args.flush_delay_ms and own.running():
            own.stop()  # left by a run that stopped early, perhaps with another delay
        if not own.running():
            # Every run from an empty server: the data of earlier runs stayed in the private
            # server's tables (1.9 GB after a day's runs), so a run's figures depended on how
            # many had run before it (bench/README.md).
            shutil.rmtree(own.datadir, ignore_errors=True)
        dsn = own.start()
    try:
        schema.apply(dsn)
        bench = Bench(dsn)
        results: dict = {
            "when": dt.datetime.now(dt.UTC).isoformat(),
            "threads": args.threads,
            "cores": os.cpu_count(),
            "server": server_settings(bench.db),
        }
        if own:
            # The premise of "the durable-commit limit": what a flush costs on this disk.
            results["server"]["disk_flush_us"] = f"{slowdisk.flush_us(own.datadir):.0f}"
            results["server"]["flush_delay_ms"] = f"{args.flush_delay_ms:g}"
        print("server: " + ", ".join(f"{k} {v}" for k, v in results["server"].items()), flush=True)
        # When each part began: the issue asks the default run to finish in under 10 minutes,
        # and on a slow day one part (Procrastinate's keyed drain) takes a fifth of it.
        began: dict[str, float] = {}
        if parts & {"ceiling", "procedure"}:
            began["ceiling"] = time.monotonic()
            results["ceiling_commits_per_s"] = bench.ceiling(args.threads, seconds)
            print(
                f"ceiling: {results['ceiling_commits_per_s']:.0f} commits/s "
                f"at {args.threads} connections",
                flush=True,
            )
        if "procedure" in parts:
            began["procedure"] = time.monotonic()
            ceiling = results["ceiling_commits_per_s"]
            proc = bench.procedure_cycles(args.threads, seconds)
            per_app = bench.procedure_cycles(args.threads, seconds, app_per_thread=True)
            batched = bench.procedure_batched(args.threads, seconds)
            for part in (proc, per_app, batched):
                # tasks/s against ceiling / commits per task: the procedure-level bound
                part["ratio_to_ceiling_bound"] = (
                    part["tasks_per_s"] * part["commits_per_task"] / ceiling
                )
            per_app["vs_one_application"] = per_app["tasks_per_s"] / proc["tasks_per_s"]
            batched["vs_single_calls"] = batched["tasks_per_s"] / proc["tasks_per_s"]
            results["procedure"] = proc
            results["procedure_app_per_thread"] = per_app
            results["procedure_batched"] = batched
            print(
                f"procedure: {proc['tasks_per_s']:.0f} tasks/s, "
                f"{proc['commits_per_task']:.2f} commits/task, "
                f"{proc['ratio_to_ceiling_bound']:.2f} of ceiling/commits (target >= 0.6); "
                + locks_text(proc),
                flush=True,
            )
            print(
                f"procedure, an application per thread: {per_app['tasks_per_s']:.0f} tasks/s "
                f"({per_app['vs_one_application']:.2f}x one application), "
                f"{per_app['ratio_to_ceiling_bound']:.2f} of ceiling/commits; "
                + locks_text(per_app),
                flush=True,
            )
            print(
                f"procedure, batches of {batched['batch']}: {batched['tasks_per_s']:.0f} tasks/s "
                f"({batched['vs_single_calls']:.2f}x single calls), "
                f"{batched['commits_per_task']:.2f} commits/task, "
                f"{batched['ratio_to_ceiling_bound']:.2f} of ceiling/commits; "
                + locks_text(batched),
                flush=True,
            )
            results["procedure_floor"] = low = floor.run(dsn, args.threads, seconds, run_threads)
            if "skipped" in low:
                print(f"procedure floor: skipped ({low['skipped']})", flush=True)
            else:
                low["touch_ratio_to_ceiling"] = low["touch_calls_per_s"] / ceiling
                low["ratio_to_ceiling_bound"] = (
                    low["tasks_per_s"] * low["commits_per_task"] / ceiling
                )
                low["orbit_vs_floor"] = per_app["tasks_per_s"] / low["tasks_per_s"]
                print(
                    f"procedure floor (not Orbit): the ceiling's UPDATE as a procedure "
                    f"{low['touch_calls_per_s']:.0f} calls/s, {low['touch_ratio_to_ceiling']:.2f} "
                    f"of ceiling; a cycle writing only task, attempt and history rows "
                    f"{low['tasks_per_s']:.0f} tasks/s, {low['ratio_to_ceiling_bound']:.2f} of "
                    f"ceiling/commits (Orbit, an application per thread: "
                    f"{low['orbit_vs_floor']:.2f}x of it)",
                    flush=True,
                )
        if "phases" in parts:
            began["phases"] = time.monotonic()
            results["phases"] = [
                bench.phases(1000 // batch, keys, batch)
                for batch in (10, 100)
                for keys in ("none", "own", "shared")
            ]
            for ph in results["phases"]:
                print(
                    f"phases, batches of {ph['batch']}, keys {ph['keys']}, "
                    "per 10 tasks: "
                    + ", ".join(
                        f"{k} {ph['wall_ms_per_10'][k]:.1f} ms ({ph['db_cpu_ms_per_10'][k]:.1f} "
                        "ms db CPU)"
                        for k in ph["wall_ms_per_10"]
                    )
                    + f"; db CPU in all {sum(ph['db_cpu_ms_per_10'].values()):.1f} ms",
                    flush=True,
                )
            results["phases_submit_repeated_keys"] = rep = bench.submit_repeated_keys(20)
            print(
                f"phases, submit of {rep['batch']} naming {rep['keys']} keys (repeated), "
                f"per 10 tasks: {rep['wall_ms_per_10']:.1f} ms ({rep['db_cpu_ms_per_10']:.1f} ms "
                "db CPU)",
                flush=True,
            )
        if "blocked" in parts:
            began["blocked"] = time.monotonic()
            sizes = [0, 10_000] + ([100_000, 1_000_000] if args.large else [])
            results["blocked"] = [bench.blocked(n, 200) for n in sizes]
            base = results["blocked"][0]["claim_p99_ms"]
            for b in results["blocked"]:
                print(
                    f"blocked: {b['parked']:>8} parked  claim p50 {b['claim_p50_ms']:.2f} ms  "
                    f"p99 {b['claim_p99_ms']:.2f} ms ({b['claim_p99_ms'] / base:.2f}x of 0)  "
                    f"rows read {b['rows_read_per_claim']:.0f}  "
                    f"release of the busy key {b['release_of_busy_key_ms']:.1f} ms",
                    flush=True,
                )
            results["sweep"] = [
                bench.sweep(n, 1000) for n in [0, 10_000] + ([100_000] if args.large else [])
            ]
            for w in results["sweep"]:
                print(
                    f"blocked: sweep of {w['expired']} expired leases behind {w['history']:>6} "
                    f"finished tasks  rows read per lease {w['rows_read_per_lease']:.1f}  "
                    f"{w['ms_per_lease']:.2f} ms per lease; before it, an empty claim read "
                    f"{w['empty_claim_rows_read']} rows and its probe {w['probe_rows_read']}",
                    flush=True,
                )
            sizes = [0, 10_000] + ([100_000] if args.large else [])
            results["unkeyed_claims"] = [bench.unkeyed_claims(n, 100) for n in sizes]
            for u in results["unkeyed_claims"]:
                print(
                    f"blocked: unkeyed session, {u['ready_keyed']:>6} READY keyed tasks  claim "
                    f"p50 {u['claim_p50_ms']:.2f} ms  p99 {u['claim_p99_ms']:.2f} ms  rows read "
                    f"{u['rows_read_per_claim']:.0f}  empty probe p50 {u['probe_p50_ms']:.2f} ms",
                    flush=True,
                )
            results["purge_lag"] = [bench.purge_lag(n) for n in sizes]  # the sizes above
            base = results["purge_lag"][0]["claim_p50_ms"]
            for g in results["purge_lag"]:
                print(
                    f"blocked: claims of 10 behind {g['churned']:>6} tasks claimed and finished "
                    f"under an open read view  p50 {g['claim_p50_ms']:.2f} ms "
                    f"({g['claim_p50_ms'] / base:.1f}x of 0)  p99 {g['claim_p99_ms']:.2f} ms  "
                    f"rows read {g['rows_read_per_claim']:.0f}  history list length "
                    f"{g['history_list_length']}",
                    flush=True,
                )
        if parts & {"e2e", "peer"}:
            proc_server, url = start_server(dsn, workers=4)
            try:
                if "peer" in parts:
                    began["peer"] = time.monotonic()
                    results["peer"] = peer(bench, url, 6000 if args.large else 2000)
                if "e2e" in parts:
                    began["e2e"] = time.monotonic()
                    n = 30_000 if args.large else 10_000
                    # (name, tasks, keys, tasks per submission, capacity per SDK worker,
                    # submissions/s: 0 = as fast as the producers go)
                    b, c = args.batch, args.capacity
                    runs = [
                        ("unkeyed", n, 0, b, c, 0),
                        ("keys1000", n, 1000, b, c, 0),
                        ("hot10", n // 4, 10, b, c, 0),
                        # At the targets' rates: the latency of a queue that keeps up.
                        ("unkeyed@1000", n, 0, b, c, 1000),
                        ("keys1000@800", n, 1000, b, c, 800),
                        ("unkeyed-cap16", n // 2, 0, b, 16, 0),  # smaller claims
                        ("unbatched", n // 2, 0, 1, c, 0),  # POST /v1/tasks per task
                    ]
                    results["e2e"] = [
                        e2e(
                            bench,
                            url,
                            name,
                            count,
                            keys,
                            producers=8,
                            workers=2,
                            capacity=capacity,
                            batch=batch,
                            rate=rate,
                        )
                        for name, count, keys, batch, capacity, rate in runs
                    ]
                    children = subprocess.run(
                        ["pgrep", "-P", str(proc_server.pid)], capture_output=True, text=True
                    ).stdout.split()
                    results["gunicorn_worker_peak_rss_mib"] = (
                        max((vm_hwm_kib(int(c)) for c in children), default=0) / 1024
                    )
            finally:
                proc_server.terminate()
                proc_server.wait(30)
            for r in results.get("e2e", []):
                print(
                    f"e2e {r['scenario']:>13} (batch {r['submit_batch']}, capacity "
                    f"{r['capacity']}): {r['tasks_per_s']:.0f} tasks/s "
                    f"(submit {r['submit_per_s']:.0f}/s), submit-to-start p50 "
                    f"{r['submit_to_start_p50_ms']:.0f} ms "
                    f"p99 {r['submit_to_start_p99_ms']:.0f} ms; CPU {r['cpu_busy_pct']:.0f}% busy "
                    f"(mariadbd {r['mariadbd_cpu_pct']:.0f}% of the machine); attempts per "
                    + ", ".join(
                        f"{k} {v:.1f}"
                        for k, v in r["attempts_per_request"].items()
                        if k != "claim_empty"
                    )
                    + f"; empty claims {r['worker_requests'].get('claim_empty', 0)}; SDK worker "
                    + f"CPU {r['sdk_worker_cpu_ms_per_task']:.2f} ms/task; "
                    + locks_text(r)
                    + f" ({r['row_lock_wait_ms']} ms)",
                    flush=True,
                )
            if "e2e" in results:
                sdk = max(r["sdk_worker_peak_rss_mib"] for r in results["e2e"])
                print(
                    f"memory: gunicorn worker {results['gunicorn_worker_peak_rss_mib']:.0f} MiB, "
                    f"SDK worker {sdk:.0f} MiB"
                )
        ends = [*list(began.values())[1:], time.monotonic()]
        results["part_seconds"] = {
            part: round(end - start, 1)
            for (part, start), end in zip(began.items(), ends, strict=True)
        }
        print(
            "seconds: "
            + ", ".join(f"{part} {took:.0f}" for part, took in results["part_seconds"].items()),
            flush=True,
        )
        results["targets"] = targets.summary(results)
        print(targets.text(results["targets"]), flush=True)
        out = ROOT / "bench" / "results" / (time.strftime("%Y%m%dT%H%M%S") + ".json")
        out.parent.mkdir(exist_ok=True)  # ignored by git: results are printed, not committed
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"written {out.relative_to(ROOT)}")
    finally:
        if own:
            own.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
