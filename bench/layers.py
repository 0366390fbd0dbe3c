"""The layers part: where a single submission's time and CPU go, and a worker round's.

On the bench's `orbit` server, in one run:

* **latency, one request at a time** (no load): p50 of ``GET /healthz`` (client, HTTP,
  gunicorn, gevent and Falcon with no work behind them), of ``task_submit`` CALLed directly
  (the driver and mariadbd) and of ``POST /v1/tasks``; what is left of the last after the other
  two is the shell's own work (body, validation, fingerprint, envelope);
* **CPU per task, 8 producers** (as the submit floor): of the producers (this process), the
  gunicorn processes and mariadbd, and what ``task_submit`` reads and writes in mariadbd
  (handler counters of one call);
* **what mariadbd runs per call**: the steps and, of them, the SQL statements of a
  submission, a claim of one task, a report of one result and a claim that finds nothing;
* **the same against the HTTP floor** (``bench/http_floor.py``: gunicorn, gevent and Falcon
  in front of the least durable submission, two rows in one transaction): what the shape
  costs before Orbit does anything; and against the SPEC floor's (the same server doing only
  what SPEC asks of a submission): what any design of this shape pays for SPEC;
* **a worker round**: one SDK worker process drains the submitted tasks; CPU per task of the
  worker, gunicorn and mariadbd;
* **where the Python CPU goes**: the same two loads again under ``py-spy`` (sampling from
  outside, 250 Hz, idle samples left out); each sample is charged to the innermost frame of a
  known layer, so the shares add up to 100 per process.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import http_floor
from e2e import noop_worker
from engine_parts import Bench
from measures import db_cpu_seconds, descendants, handler_reads, mariadbd_pids, pct, run_threads

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import SubmitTaskRequest

ROOT = Path(__file__).resolve().parent.parent
TASKS = 4_000
PRODUCERS = 8
SEQUENTIAL = 500

# Layers a sample is charged to: the innermost frame whose file path holds one of these, in
# this order of precedence when several match the same frame.
LAYERS = (
    ("pymysql/", "driver (pymysql)"),
    ("urllib3/", "HTTP client (urllib3)"),
    ("http/client", "HTTP client (urllib3)"),
    ("/json/", "JSON"),
    ("orbit_shell/validation", "validation"),
    ("orbit_shell/sdk/", "SDK"),
    ("orbit_shell/", "Orbit shell"),
    ("falcon/", "Falcon"),
    ("gunicorn/", "gunicorn"),
    ("gevent/", "gevent (hub, sockets)"),
    ("socket.py", "sockets"),
    ("selectors.py", "sockets"),
    ("ssl.py", "sockets"),
)


def layer(frame: str) -> str | None:
    for needle, name in LAYERS:
        if needle in frame:
            return name
    return None


def shares(raw: Path) -> dict[str, float]:
    """A py-spy raw (collapsed) profile: the percent of its samples per layer."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        charged = next((c for c in map(layer, reversed(frames)) if c), "other (stdlib, C)")
        counts[charged] += int(n)
    total = sum(counts.values()) or 1
    return {k: round(100 * v / total, 1) for k, v in counts.most_common()}


class Sampler:
    """py-spy recording ``pid`` and its subprocesses until stopped; ``proc`` is None when
    py-spy is not installed (the part then reports the other figures).

    Only samples of a thread holding the GIL count (``--gil``): py-spy's own idle test
    counts a gevent hub waiting in epoll as busy, and the GIL is let go there. The shares are
    of the time the GIL was held, which on two busy cores includes a holder waiting for one,
    so they split the Python time between layers and do not add up to the measured CPU; what
    a process does without the GIL (system calls) is in none of them."""

    RATE = 250

    def __init__(self, pid: int, name: str) -> None:
        self.out = ROOT / ".scratch" / f"layers-{name}.txt"
        self.proc = None
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if Path(spy).exists():
            self.out.unlink(missing_ok=True)
            command = [spy, "record", "--pid", str(pid), "--subprocesses", "--gil"]
            command += ["--rate", str(self.RATE), "--format", "raw", "--output", str(self.out)]
            self.proc = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            time.sleep(1.0)  # attached before the load starts

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        self.proc.wait(60)
        return shares(self.out) if self.out.exists() else None


def _request(queue: str, n: int) -> SubmitTaskRequest:
    return SubmitTaskRequest(
        queue_id=queue, handler="noop", handler_version="v1", payload_version="v1", payload={"n": n}
    )


def latency(bench: Bench, url: str, queue: str) -> dict[str, float]:
    """p50 milliseconds of one request at a time: health, the procedure alone, a submission."""
    c = Client(url, bench.token)
    health, submit, call = [], [], []
    tag = secrets.token_hex(3)
    for n in range(SEQUENTIAL):
        t0 = time.perf_counter()
        c.request("GET", "/healthz")
        health.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        c.submit_task(f"lat-{tag}-{n}", _request(queue, n))
        submit.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        bench.submit(bench.db, f"direct-{tag}-{n}")
        call.append(time.perf_counter() - t0)
    c.close()
    out = {
        "healthz_p50_ms": pct(health, 50) * 1000,
        "procedure_p50_ms": pct(call, 50) * 1000,
        "submission_p50_ms": pct(submit, 50) * 1000,
    }
    out["shell_p50_ms"] = out["submission_p50_ms"] - out["healthz_p50_ms"] - out["procedure_p50_ms"]
    return out


# The session counters of SQL statements a routine runs (MariaDB and MySQL 8 count those inside
# routines too).
SQL = ", ".join(
    f"'Com_{c}'"
    for c in ("select", "insert", "insert_select", "update", "update_multi", "delete",
              "delete_multi", "call_procedure")
)  # fmt: skip


def procedure_counters(bench: Bench, queue: str) -> dict[str, int]:
    """Handler reads and writes of one ``task_submit`` call (after a warm-up call), and for a
    submission, a claim of one task, a report of one result and a claim that finds nothing
    what mariadbd ran: its steps (``Queries``: every DECLARE, SET and IF of a routine as well
    as its statements) and, of them, the SQL statements (the ``Com_`` counters of SELECT,
    INSERT, UPDATE, DELETE and the helper CALLs). A step costs a few microseconds, an SQL
    statement tens, whatever it reads."""
    tag = secrets.token_hex(3)
    [row] = bench.db.query("SELECT id FROM queues WHERE public_id = %s", (queue,))
    session = bench.hello(bench.db, f"layers-{tag}", capacity=10, queue_public=queue)
    counts: dict[str, int] = {}
    with bench.db.connection() as conn:

        def status(names: str) -> dict[str, int]:
            with conn.cursor() as cur:
                cur.execute(f"SHOW SESSION STATUS WHERE Variable_name IN ({names})")
                return {r["Variable_name"]: int(r["Value"]) for r in cur.fetchall()}

        def writes() -> int:
            return sum(status("'Handler_write', 'Handler_update', 'Handler_delete'").values())

        def call(routine: str, *args) -> list[dict]:
            with conn.cursor() as cur:
                marks = ", ".join(["%s"] * len(args))
                cur.execute(f"CALL {bench.db.routine(routine)}({marks})", args)
                rows = list(cur.fetchall())
                while cur.nextset():
                    pass
            return rows

        def counters() -> tuple[int, int]:
            found = status(f"'Queries', {SQL}")
            return found.pop("Queries"), sum(found.values())

        def statements(name: str, routine: str, *args) -> list[dict]:
            steps, sql = counters()
            rows = call(routine, *args)
            after = counters()
            # The SHOW that reads the counters is a step of its own; the CALL made here is
            # counted with the helpers it CALLs.
            counts[f"{name}_steps"], counts[f"{name}_sql"] = (
                after[0] - steps - 1,
                after[1] - sql - 1,
            )
            return rows

        call("task_submit", *bench.submit_args(f"warm-{tag}", queue=row["id"]))
        r0, w0 = handler_reads(conn), writes()
        call("task_submit", *bench.submit_args(f"count-{tag}", queue=row["id"]))
        # The counters' own SHOW statements read a few rows; measured apart and taken off.
        r1, w1 = handler_reads(conn), writes()
        r2 = handler_reads(conn)
        counts.update(rows_read=(r1 - r0) - (r2 - r1), rows_written=w1 - w0)
        statements("submit", "task_submit", *bench.submit_args(f"steps-{tag}", queue=row["id"]))
        # The queue's tasks are those three; the claim of one takes the first.
        [granted] = statements("claim", "worker_claim", bench.ns, session, 1, 1)
        result = [{"attempt_id": granted["attempt_id"], "outcome": "succeeded",
                   "retryable": 0, "result": None, "error": None}]  # fmt: skip
        statements("result", "attempt_result_many", bench.ns, session, json.dumps(result))
        # A claim that finds nothing, as a long poll's first one does when work is sparse: after
        # one that takes the other two.
        rest = call("worker_claim", bench.ns, session, 10, 1)
        statements("empty_claim", "worker_claim", bench.ns, session, 1, 1)
        results = [{**result[0], "attempt_id": r["attempt_id"]} for r in rest]
        call("attempt_result_many", bench.ns, session, json.dumps(results))
        call("worker_goodbye", bench.ns, session)
    return counts


def submissions(bench: Bench, url: str, queue: str, server: int, sampled: bool) -> dict:
    """``TASKS`` single submissions from ``PRODUCERS`` threads (the submit floor's own
    producers, ``http_floor.submit_only``): tasks/s and CPU ms per task of each side (and,
    ``sampled``, the server's layers)."""
    spy = Sampler(server, "submit") if sampled else None
    gunicorn, db = descendants(server), mariadbd_pids()
    g0, d0, p0 = cpu(gunicorn), cpu(db), time.process_time()
    sent = http_floor.submit_only(url, bench.token, queue, TASKS, PRODUCERS, run_threads)
    per = 1000 / TASKS
    out = {
        "tasks_per_s": sent["per_s"],
        "producers_cpu_ms": (time.process_time() - p0) * per,
        "gunicorn_cpu_ms": (cpu(gunicorn) - g0) * per,
        "mariadbd_cpu_ms": (cpu(db) - d0) * per,
    }
    if spy:
        out["server_layers"] = spy.stop()
    return out


def drain(bench: Bench, url: str, queue: str, server: int, sampled: bool) -> dict:
    """One SDK worker process (capacity 100, no prefetch) drains the queue's ``TASKS`` tasks:
    tasks/s and CPU ms per task of the worker (from its ready line to its exit, as it prints),
    gunicorn and mariadbd (and, ``sampled``, the worker's and the server's layers)."""
    spies = (Sampler(server, "worker-server"),) if sampled else ()
    gunicorn, db = descendants(server), mariadbd_pids()
    g0, d0 = cpu(gunicorn), cpu(db)
    worker = noop_worker(
        bench, url, queue, 100, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    worker.stdout.readline()  # ready=: imported and connected
    t0 = time.monotonic()
    if sampled:
        spies += (Sampler(worker.pid, "worker"),)
    left = "SELECT COUNT(*) AS n FROM tasks t JOIN queues q ON q.id = t.queue_id "
    left += "WHERE q.public_id = %s AND t.state <> 'SUCCEEDED'"
    while bench.db.query(left, (queue,))[0]["n"]:
        time.sleep(0.05)
    seconds = time.monotonic() - t0
    g1, d1 = cpu(gunicorn), cpu(db)
    out: dict = {}
    if spies:
        out["server_layers"], out["worker_layers"] = (s.stop() for s in spies)
    worker.send_signal(signal.SIGTERM)
    printed = dict(line.split("=", 1) for line in worker.communicate(timeout=60)[0].split())
    per = 1000 / TASKS
    out.update(
        tasks_per_s=TASKS / seconds,
        worker_cpu_ms=float(printed["cpu_s"]) * per,
        gunicorn_cpu_ms=(g1 - g0) * per,
        mariadbd_cpu_ms=(d1 - d0) * per,
    )
    return out


def run_layers(bench: Bench, url: str, server: int) -> dict:
    c = Client(url, bench.token)
    queues = [c.create_queue(f"layers-{secrets.token_hex(3)}").queue_id for _ in range(4)]
    c.close()
    results = {
        "latency": latency(bench, url, queues[0]),
        "procedure": procedure_counters(bench, queues[3]),
        "submissions": submissions(bench, url, queues[1], server, sampled=False),
    }
    with http_floor.serving(bench.dsn, bench.db) as (proc, floor_url):
        results["floor"] = submissions(bench, floor_url, queues[1], proc.pid, sampled=False)
    with http_floor.spec_serving(bench.dsn, bench.db, bench.token, queues[1]) as (proc, spec):
        results["spec_floor"] = submissions(bench, spec, queues[1], proc.pid, sampled=False)
    results["round"] = drain(bench, url, queues[1], server, sampled=False)
    results["submissions_sampled"] = submissions(bench, url, queues[2], server, sampled=True)
    results["round_sampled"] = drain(bench, url, queues[2], server, sampled=True)
    report(results)
    return results


def report(r: dict) -> None:
    lat, sub, rnd = r["latency"], r["submissions"], r["round"]
    print(
        f"layers: one request at a time, p50: GET /healthz {lat['healthz_p50_ms']:.2f} ms, "
        f"task_submit CALLed {lat['procedure_p50_ms']:.2f} ms, POST /v1/tasks "
        f"{lat['submission_p50_ms']:.2f} ms (the shell's own {lat['shell_p50_ms']:.2f} ms)",
        flush=True,
    )
    print(
        f"layers: {PRODUCERS} producers, {sub['tasks_per_s']:.0f} tasks/s; CPU ms a task: "
        f"producers {sub['producers_cpu_ms']:.2f}, gunicorn {sub['gunicorn_cpu_ms']:.2f}, "
        f"mariadbd {sub['mariadbd_cpu_ms']:.2f}; one task_submit reads "
        f"{r['procedure']['rows_read']} rows and writes {r['procedure']['rows_written']}",
        flush=True,
    )
    c = r["procedure"]
    print(
        "layers: what mariadbd runs, steps (SQL statements): a submission "
        f"{c['submit_steps']} ({c['submit_sql']}), a claim of one task {c['claim_steps']} "
        f"({c['claim_sql']}), a report of one result {c['result_steps']} ({c['result_sql']}), "
        f"a claim that finds nothing {c['empty_claim_steps']} ({c['empty_claim_sql']})",
        flush=True,
    )
    for name, low in (("the HTTP floor", r["floor"]), ("the SPEC floor's", r["spec_floor"])):
        print(
            f"layers: the same against {name}, {low['tasks_per_s']:.0f} tasks/s; CPU ms a "
            f"task: producers {low['producers_cpu_ms']:.2f}, gunicorn "
            f"{low['gunicorn_cpu_ms']:.2f}, mariadbd {low['mariadbd_cpu_ms']:.2f}",
            flush=True,
        )
    print(
        f"layers: a worker round (1 SDK worker, capacity 100), {rnd['tasks_per_s']:.0f} "
        f"tasks/s; CPU ms a task: worker {rnd['worker_cpu_ms']:.2f}, gunicorn "
        f"{rnd['gunicorn_cpu_ms']:.2f}, mariadbd {rnd['mariadbd_cpu_ms']:.2f}",
        flush=True,
    )
    for label, run, layers, measured in (
        ("gunicorn, submissions", sub, "server_layers", "gunicorn_cpu_ms"),
        ("gunicorn, worker round", rnd, "server_layers", "gunicorn_cpu_ms"),
        ("SDK worker, worker round", rnd, "worker_layers", "worker_cpu_ms"),
    ):
        sampled = r["submissions_sampled" if run is sub else "round_sampled"].get(layers)
        if not sampled:
            print("layers: py-spy not installed; the layer shares were left out", flush=True)
            break
        print(
            f"layers: {label}, {run[measured]:.2f} CPU ms a task; % of its Python time (the "
            "GIL held) per layer: " + ", ".join(f"{k} {v:g}" for k, v in sampled.items()),
            flush=True,
        )


def cpu(pids: list[int]) -> float:
    return db_cpu_seconds(pids)
