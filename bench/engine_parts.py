"""The parts that call the procedures directly: ceiling, procedure cycles (single, per
application, batched), phases, blocked claims, the sweeper, unkeyed claims, purge lag."""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import floor
from measures import (
    counted_call,
    db_cpu_seconds,
    history_length,
    key_turn_costs,
    lock_counters,
    lock_delta,
    mariadbd_pids,
    park,
    pct,
    run_threads,
)

from orbit_shell.cli import admin
from orbit_shell.engine import batches, db
from orbit_shell.engine.db import Database
from orbit_shell.server import auth


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
        self._producer_dsn: str | None = None
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
            self._worker_dsn = self._account("bench_worker", admin.WORKER_PROCEDURES)
        return self._worker_dsn

    @property
    def producer_dsn(self) -> str:
        """The direct producer's DSN (``orbit-admin producer-account``), as worker_dsn."""
        if self._producer_dsn is None:
            self._producer_dsn = self._account("bench_producer", admin.PRODUCER_PROCEDURES)
        return self._producer_dsn

    def _account(self, user: str, procedures: tuple[str, ...]) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            account = admin.worker_account(
                self.dsn,
                argparse.Namespace(
                    user=user,
                    host="127.0.0.1",
                    output=str(Path(tmp) / "account.json"),
                    application=self.application,
                    environment="bench",
                    namespace="ns",
                ),
                procedures,
            )
        return account["dsn"]

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
            None,
        )
        return session["session_id"]

    def submit_args(self, idempotency_key: str, key: str = "", queue: int | None = None) -> tuple:
        """task_submit's arguments for a no-op task of the bench's namespace."""
        return (
            self.ns,
            queue or self.queue,
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
            "wait",
            None,
            None,
            "bench",
            None,
            None,
            None,
        )

    def submit(
        self, d: Database, idempotency_key: str, key: str = "", queue: int | None = None
    ) -> None:
        d.call("task_submit", *self.submit_args(idempotency_key, key, queue))

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
        like the ceiling's). Without quotas one application's writers share no row either
        (sql/README.md, "Limits without a shared lock"), so the two should run alike."""
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
                [rows] = d.call("worker_claim", b.ns, sid, 1, 0)
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

    def call_costs(self) -> dict[str, float]:
        """mariadbd's CPU per single call of the cycle (``floor.call_costs``): task_submit,
        worker_claim of one, attempt_start, attempt_result, on a queue and session of their
        own, so the floor's calls can be set beside them step by step."""
        d = Database(self.dsn, pool_size=1)
        queue, sid = self.batch_queue(d, f"calls-{secrets.token_hex(3)}", 1000)
        attempts: list[str] = []

        def claim(n: int) -> None:
            [[row]] = d.call("worker_claim", self.ns, sid, 1, 0)
            attempts.append(row["attempt_id"])

        out = floor.call_costs(
            {
                "submit": lambda n: self.submit(d, secrets.token_hex(12), queue=queue),
                "claim": claim,
                "start": lambda n: d.call("attempt_start", self.ns, sid, attempts[n]),
                "result": lambda n: d.call(
                    "attempt_result", self.ns, sid, attempts[n], "succeeded", 0, None, None
                ),
            }
        )
        d.close()
        return out

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
    def batch_results(attempt_ids: list[str], result: str = "") -> str:
        """Successes of ``attempt_ids``, each with ``result`` as its text ('' for none)."""
        return json.dumps(
            [
                {
                    "attempt_id": a,
                    "outcome": "succeeded",
                    "retryable": 0,
                    "result": result,
                    "error": "",
                }
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
                    [rows] = d.call("worker_claim", self.ns, sid, batch, 0)
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
        round), each key named by several items, the e2e hot-keys run's shape. Wall time and
        mariadbd CPU per 10 tasks, as in ``phases``."""
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

    def key_turns(self, turns: int, keys: int) -> dict:
        """One thread, the database's side of the hot-keys run: a session holds one running
        task of each of ``keys`` keys, each key with a backlog; a turn reports them all and
        claims and starts in the same call (worker_report_claim with start: each result frees
        its key and promotes the key's next task, which the claim takes and starts), as the
        SDK worker without prefetch does. Wall time and mariadbd CPU per turn and per task: at
        one key a turn, what a key's handoff costs the database on its own."""
        d = Database(self.dsn, pool_size=1)
        costs = key_turn_costs(self.key_turn(d, keys, turns + 5), turns, keys)
        d.close()
        return costs

    def key_turn(self, d: Database, keys: int, turns: int, procedure: str = "worker_report_claim"):
        """A queue and a session of their own on ``d``'s connection, holding one running task
        of each of ``keys`` keys with a backlog for ``turns`` turns; returns ``turn()``, which
        makes one turn through ``procedure`` and returns how many tasks it claimed."""
        queue, sid = self.batch_queue(d, f"turns-{secrets.token_hex(3)}", keys)
        prefix = secrets.token_hex(4)
        names = (f"{prefix}-{n % keys}" for n in itertools.count())
        backlog = keys * (turns + 1)
        for done in range(0, backlog, 100):
            items = self.batch_items(queue, min(100, backlog - done), names)
            d.call("task_submit_many", self.ns, "bench", items)
        [rows] = d.call("worker_claim", self.ns, sid, keys, 1)
        held = [r["attempt_id"] for r in rows]

        def turn() -> int:
            nonlocal held
            results = self.batch_results(held)
            _, rows = d.call(procedure, self.ns, sid, results, keys, 1)[:2]
            held = [r["attempt_id"] for r in rows]
            return len(held)

        return turn

    def batch_cycle(self, call, queue: int, sid: str, batch: int, result: str = "") -> list[str]:
        """One round of the batch cycle through ``call(procedure, *args)``: submit ``batch``
        no-op tasks, claim up to ``batch``, start and report what was claimed (nothing when
        the claim came back empty), each with ``result`` as its text. Returns the claimed
        attempts' ids."""
        call("task_submit_many", self.ns, "bench", self.batch_items(queue, batch))
        [rows] = call("worker_claim", self.ns, sid, batch, 0)[:1]
        ids = [r["attempt_id"] for r in rows]
        if ids:
            call("attempt_start_many", self.ns, sid, json.dumps(ids), 0)
            call("attempt_result_many", self.ns, sid, self.batch_results(ids, result))
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

    def blocked(self, parked: int, samples: int, limit: int = 1, keys: int = 1) -> dict:
        """Claims of free keys while ``parked`` tasks wait behind ``keys`` busy keys, each
        of limit ``limit`` (a key policy, P1) with every slot held (P4: a full key keeps its
        tasks out of every claim)."""
        key = "hot-" + secrets.token_hex(4)
        busy = [key] if keys == 1 else [f"{key}-{j}" for j in range(keys)]
        d = Database(self.dsn, pool_size=2)
        holder = self.hello(d, "holder-" + key, capacity=limit * keys)
        for k in busy:
            if limit > 1:
                d.call("key_policy_write", self.ns, None, "KEY", k, limit, None, None, 0)
            for s in range(limit):
                self.submit(d, f"{k}-held-{s}", k)
        held_ids: list[str] = []
        while len(held_ids) < limit * keys:  # one grant a key a claim: each promotes the next
            [rows] = d.call("worker_claim", self.ns, holder, limit * keys, 0)[:1]
            assert rows, "the busy keys' slots were not all granted"
            for row in rows:
                d.call("attempt_start", self.ns, holder, row["attempt_id"])
                held_ids.append(row["attempt_id"])
        held = {"attempt_id": held_ids[0]}
        for k in busy:
            if parked:
                park(self.dsn, self.ns, self.app, self.queue, k, parked // keys)
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
            "limit": limit,
            "keys": keys,
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
            [rows] = d.call("worker_claim", self.ns, worker, 100, 0)[:1]
            ids = [r["attempt_id"] for r in rows]
            batches.start_many(d, self.ns, worker, ids)
            outcomes = [{"attempt_id": a, "outcome": "succeeded"} for a in ids]
            batches.result_many(d, self.ns, worker, outcomes)
        d.call("worker_goodbye", self.ns, worker)  # an idle open session takes a fair share
        # What an empty claim and its probe read on a queue with that history: the recovery
        # guard's and the probe's look for expired leases and due backoff.
        conn = db.connect(self.dsn)
        idle = self.hello(d, f"{name}-idle", 10, queue_public=public["public_id"])
        _, claim_reads, granted = counted_call(conn, "worker_claim", self.ns, idle, 10, 0)
        _, probe_reads, [ready] = counted_call(conn, "session_ready", self.ns, idle)
        assert not granted and not ready["ready"], (granted, ready)
        d.call("worker_goodbye", self.ns, idle)
        sessions = []
        for n in range(0, expired, 100):
            d.call("task_submit_many", self.ns, "bench", self.batch_items(queue, 100))
            sessions.append(
                self.hello(d, f"{name}-gone-{n}", 100, queue_public=public["public_id"])
            )
            [rows] = d.call("worker_claim", self.ns, sessions[-1], 100, 0)[:1]
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
        ms, reads, rows = counted_call(conn, "worker_claim", self.ns, sid, 1, 0)
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
                ms, read, rows = counted_call(conn, "worker_claim", self.ns, sid, 10, 0)
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
