"""The celery part: Orbit's e2e shapes beside Celery with a Redis broker (bench/peer_celery.py),
alternated shape by shape in one invocation, on Redis durable and as it ships.

Both sides run two worker processes (the e2e part's SDK workers; Celery's ``--pool threads`` at
concurrency 10 and 100, and prefork with a child per core, each tried on one task per call
and the best used for the other shapes) and eight producer threads. The shapes: one task per
call (``POST /v1/tasks`` / ``.delay()``), the same paced at 450 tasks/s for submit-to-start,
batches of 100 (``POST /v1/tasks/batch`` / a ``group`` of 100), 1,000 keys and 10 hot keys
(Celery: a Redis lock per key, retried when held, with an overlap check). One task per call
and its paced submit-to-start are measured on Orbit's side over HTTP and again with no HTTP at
all (``DirectProducer`` and the SDK workers' MySQL transport), which is how Celery's clients
talk to Redis. It also runs with the direct producer and the workers over HTTP, and the direct
producer's submissions, the HTTP floor's and the SPEC floor's run with no worker; each of these
five is followed by a round of Celery's best pool, and its ratios are to that round. The no-HTTP
run less the direct producer's submissions is what Orbit's worker side costs a task, and the
HTTP floor's submission plus that is the least one task per call over HTTP can cost with
Orbit's worker (the SPEC floor's plus that, the least for a submission doing what SPEC asks).
The SPEC floor's whole task (``bench/spec_floor_e2e.py``: its submissions and two floor worker
processes, each round one request) runs three times, each followed by a Celery round, and the
pair of the median ratio is kept: what any design of this shape doing what SPEC asks reaches;
it runs once more at the paced rate, followed by a Celery round at that rate. One task per call
says where each side's CPU went by process (producers, server, mariadbd, workers).
Submit-to-start is measured again at 200 tasks/s: on a slow day 450/s is past one side's
ceiling or the other's, and its latency is then a backlog's. The paced lines and the one task
per call line say each side's CPU a task, how many requests Orbit's workers made a task and how
many tasks their reports carried: below its ceiling they carry fewer, and a task pays more of
their fixed cost alone.
"""

from __future__ import annotations

import functools
import os
import secrets

import http_floor
import peer_celery
import spec_floor_e2e
from e2e import e2e
from engine_parts import Bench
from measures import run_threads

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.producer import DirectProducer

PACED = 450.0
PACED_LOW = 200.0
# name: (tasks, keys, tasks per request or group, rate)
SHAPES = {
    "one_per_call": (5_000, 0, 1, 0.0),
    "paced": (4_500, 0, 1, PACED),
    "paced_low": (2_000, 0, 1, PACED_LOW),
    "batches": (10_000, 0, 100, 0.0),
    "keys1000": (10_000, 1_000, 100, 0.0),
    "hot10": (2_500, 10, 100, 0.0),
}
POOLS = [("threads", 10), ("threads", 100), ("prefork", 0)]


def _orbit(
    bench: Bench, url: str, shape: str, capacity: int, direct: bool = False, workers: bool = False
) -> dict:
    """Orbit's side of ``shape``: over HTTP; with ``direct`` the producers submit over MySQL
    (``DirectProducer``), and with ``workers`` too the SDK workers (W9): no HTTP at all, as
    Celery's clients talk to Redis."""
    tasks, keys, batch, rate = SHAPES[shape]
    run = e2e(
        bench,
        url,
        f"celery-{shape}",
        tasks,
        keys,
        producers=8,
        workers=2,
        capacity=capacity,
        batch=batch,
        rate=rate,
        direct_producer=direct,
        direct=workers,
    )
    cores = os.cpu_count() or 1
    run["cpu_ms_per_task"] = run["cpu_busy_pct"] / 100 * cores * 1000 / run["tasks_per_s"]
    return run


def _celery(broker: peer_celery.Redis, shape: str, pool: str, concurrency: int) -> dict:
    tasks, keys, group, rate = SHAPES[shape]
    return peer_celery.run(
        broker, tasks, keys, group=group, rate=rate, pool=pool, concurrency=concurrency or 10
    )


def _floor(bench: Bench, kind: str = "floor") -> dict:
    """The HTTP floor (``bench/http_floor.py``): one task per call from the same 8 producers to
    gunicorn and Falcon in front of a two-row transaction, no worker. What any submission of
    that shape costs the machine, before it is checked, kept or run. ``kind`` ``spec``: the
    SPEC floor's, with the least SPEC asks of each submission (credential, Idempotency-Key,
    input checks, task and history rows). The floor reads no queue, and the SPEC floor's
    knows the one named: the requests name one that has the form of a queue id."""
    tasks = SHAPES["one_per_call"][0]
    return http_floor.floor_submissions(
        bench.dsn, bench.db, bench.token, secrets.token_hex(16), tasks, 8, run_threads, kind
    )


def _spec_floor_e2e(bench: Bench, shape: str = "one_per_call") -> dict:
    """The SPEC floor's one task per call end to end (``bench/spec_floor_e2e.py``): its
    submissions from the same 8 producers and two floor worker processes, each round one
    request: what a design doing only what SPEC asks reaches on this shape. ``shape`` "paced":
    the same at the paced shape's rate."""
    tasks, _, _, rate = SHAPES[shape]
    return spec_floor_e2e.one_per_call(bench.dsn, bench.db, bench.token, tasks, 8, 2, rate)


def _direct_submissions(bench: Bench, url: str) -> dict:
    """The direct producer's single submissions from the same 8 producers, no worker: what the
    no-HTTP run's submissions cost, so the rest of that run's CPU is the worker side's. Into a
    queue of its own, which nothing claims."""
    client = Client(url, bench.token)
    queue = client.create_queue(f"celery-direct-only-{secrets.token_hex(3)}").queue_id
    client.close()
    dsn = bench.producer_dsn
    return http_floor.submit_only(
        url,
        bench.token,
        queue,
        SHAPES["one_per_call"][0],
        8,
        run_threads,
        connect=lambda: DirectProducer(dsn, bench.application, "bench", "ns"),
    )


def _ratio(mine: dict, theirs: dict, ours: str, peer: str, figure: str) -> float:
    """Orbit's ``figure`` of shape ``ours`` over Celery's of shape ``peer``."""
    return mine[ours][figure] / theirs[peer][figure]


def run_celery(bench: Bench, url: str, capacity: int) -> dict:
    try:
        import celery  # noqa: F401
        import redis  # noqa: F401

        peer_celery.redis_binary()
    except (ImportError, peer_celery.PeerMissing) as exc:
        print(f"celery: skipped ({exc}); pip install -e '.[bench]'", flush=True)
        return {"skipped": str(exc)}
    out: dict = {}
    for durable in (True, False):
        setting = "durable" if durable else "default"
        broker = peer_celery.Redis(durable)
        try:
            mine: dict[str, dict] = {}
            theirs: dict[str, dict] = {}
            pools, rounds = {}, []
            for pool, concurrency in POOLS:  # one task per call: Orbit, then each pool
                rounds.append(_orbit(bench, url, "one_per_call", capacity))
                pools[f"{pool}{concurrency or ''}"] = _celery(
                    broker, "one_per_call", pool, concurrency
                )
            # Orbit's median round of the three it alternated with.
            mine["one_per_call"] = sorted(rounds, key=lambda x: x["tasks_per_s"])[1]
            best_name, theirs["one_per_call"] = max(
                pools.items(), key=lambda kv: kv[1]["tasks_per_s"]
            )
            best = next(p for p in POOLS if f"{p[0]}{p[1] or ''}" == best_name)
            # Each other way of one task per call, followed by a round of Celery's best pool
            # that its ratios are taken against: the machine's speed drifts over the minutes
            # these take, by as much as a ratio's distance from its target, and two adjacent
            # rounds see the same machine.
            one = functools.partial(_orbit, bench, url, "one_per_call", capacity)
            for name, measure in (
                ("one_per_call_direct", functools.partial(one, True)),
                ("one_per_call_mysql", functools.partial(one, True, True)),
                ("http_floor", functools.partial(_floor, bench)),
                ("spec_floor", functools.partial(_floor, bench, "spec")),
                ("direct_submissions", functools.partial(_direct_submissions, bench, url)),
            ):
                mine[name] = measure()
                theirs[name] = _celery(broker, "one_per_call", *best)
            # The SPEC floor's whole task decides whether a target is within reach of any
            # design of this shape: three pairs of rounds, the pair of the median ratio kept.
            pairs = []
            for _ in range(3):
                pairs.append((_spec_floor_e2e(bench), _celery(broker, "one_per_call", *best)))
            pairs.sort(key=lambda p: p[0]["tasks_per_s"] / p[1]["tasks_per_s"])
            mine["spec_floor_e2e"], theirs["spec_floor_e2e"] = pairs[1]
            mine["spec_floor_e2e"]["pair_ratios"] = [
                p[0]["tasks_per_s"] / p[1]["tasks_per_s"] for p in pairs
            ]
            for shape in SHAPES:
                if shape == "one_per_call":
                    continue
                mine[shape] = _orbit(bench, url, shape, capacity)
                theirs[shape] = _celery(broker, shape, *best)
                if shape == "paced":
                    mine["paced_mysql"] = _orbit(bench, url, shape, capacity, True, True)
                    # The SPEC floor's whole task at the same rate, and a Celery round after.
                    mine["spec_floor_paced"] = _spec_floor_e2e(bench, shape)
                    theirs["spec_floor_paced"] = _celery(broker, shape, *best)
        finally:
            broker.stop()

        ratio = functools.partial(_ratio, mine, theirs)
        # The no-HTTP run less its submissions: Orbit's claim, start, run and report of a task,
        # each part in its own neighbour Celery round's whole task.
        cpu_ratio = {
            name: ratio(name, name, "cpu_ms_per_task")
            for name in ("one_per_call_mysql", "direct_submissions", "http_floor", "spec_floor")
        }
        worker_ratio = cpu_ratio["one_per_call_mysql"] - cpu_ratio["direct_submissions"]
        out[setting] = {
            "celery_pool": best_name,
            "celery_pools_one_per_call": pools,
            "orbit": mine,
            "celery": theirs,
            "ratio": {s: ratio(s, s, "tasks_per_s") for s in SHAPES},
            "direct_ratio": ratio("one_per_call_direct", "one_per_call_direct", "tasks_per_s"),
            "direct_cpu_per_task_ratio": ratio(
                "one_per_call_direct", "one_per_call_direct", "cpu_ms_per_task"
            ),
            "floor_cpu_per_task_ratio": cpu_ratio["http_floor"],
            # The floor's submit_only says per_s: it runs no worker, so no task finishes.
            "floor_ratio": mine["http_floor"]["per_s"] / theirs["http_floor"]["tasks_per_s"],
            "mysql_ratio": ratio("one_per_call_mysql", "one_per_call_mysql", "tasks_per_s"),
            "mysql_cpu_per_task_ratio": cpu_ratio["one_per_call_mysql"],
            "cpu_per_task_ratio": ratio("one_per_call", "one_per_call", "cpu_ms_per_task"),
            "paced_p50_ratio": ratio("paced", "paced", "submit_to_start_p50_ms"),
            "paced_mysql_p50_ratio": ratio("paced_mysql", "paced", "submit_to_start_p50_ms"),
            "paced_low_p50_ratio": ratio("paced_low", "paced_low", "submit_to_start_p50_ms"),
            "spec_paced_p50_ratio": ratio(
                "spec_floor_paced", "spec_floor_paced", "submit_to_start_p50_ms"
            ),
            "worker_side_cpu_ms": mine["one_per_call_mysql"]["cpu_ms_per_task"]
            - mine["direct_submissions"]["cpu_ms_per_task"],
            "worker_side_cpu_ratio": worker_ratio,
            # The least an HTTP submission of this shape and Orbit's worker cost together; and
            # the least one that does what SPEC asks.
            "http_least_cpu_ratio": cpu_ratio["http_floor"] + worker_ratio,
            "spec_floor_cpu_per_task_ratio": cpu_ratio["spec_floor"],
            "spec_least_cpu_ratio": cpu_ratio["spec_floor"] + worker_ratio,
            "spec_e2e_ratio": ratio("spec_floor_e2e", "spec_floor_e2e", "tasks_per_s"),
            "spec_e2e_cpu_ratio": ratio("spec_floor_e2e", "spec_floor_e2e", "cpu_ms_per_task"),
        }
        _print(setting, out[setting])
    return out


def _carried(run: dict) -> str:
    """How many requests an Orbit run's workers made a task, and how many tasks their reports
    carried (those that claimed too, and those alone): below its ceiling each carries fewer,
    and a task pays more of their fixed cost alone."""
    per, calls = run.get("attempts_per_request", {}), run.get("worker_requests", {})
    kinds = [k for k in ("result", "report_claim") if calls.get(k)]
    if not kinds or not run.get("completed"):
        return ""
    reports = sum(per[k] * calls[k] for k in kinds) / sum(calls[k] for k in kinds)
    return (
        f"; Orbit's workers make {sum(calls.values()) / run['completed']:.2f} requests a task, "
        f"their reports carry {reports:.1f} tasks"
    )


def _split(run: dict) -> str:
    """A run's CPU a task by process role (``measures.cpu_split``)."""
    roles = ("producers", "server", "mariadbd", "workers")
    split = run.get("cpu_split_ms_per_task", {})
    return ", ".join(f"{role} {split.get(role, 0.0):.2f}" for role in roles)


def _print(setting: str, r: dict) -> None:
    o, c, ratio = r["orbit"], r["celery"], r["ratio"]
    pools = ", ".join(
        f"{n} {p['tasks_per_s']:,.0f}" for n, p in r["celery_pools_one_per_call"].items()
    )
    lines = [
        f"celery ({setting} Redis): Celery one task per call by pool: {pools} tasks/s; "
        f"the best, {r['celery_pool']}, runs the other shapes",
        f"celery ({setting} Redis): one task per call: Orbit "
        f"{o['one_per_call']['tasks_per_s']:,.0f} / Celery "
        f"{c['one_per_call']['tasks_per_s']:,.0f} tasks/s = {ratio['one_per_call']:.2f}x "
        "(target >= 1.0)",
        f"celery ({setting} Redis): CPU of the machine per task: Orbit "
        f"{o['one_per_call']['cpu_ms_per_task']:.2f} / Celery "
        f"{c['one_per_call']['cpu_ms_per_task']:.2f} ms = {r['cpu_per_task_ratio']:.2f}x "
        f"(target <= 1.0){_carried(o['one_per_call'])}",
        f"celery ({setting} Redis): where one task per call's CPU goes, ms a task: Orbit "
        f"{_split(o['one_per_call'])}; the SPEC floor's whole task {_split(o['spec_floor_e2e'])}",
        f"celery ({setting} Redis): the same with Orbit's direct producer (MySQL): "
        f"{o['one_per_call_direct']['tasks_per_s']:,.0f} tasks/s = {r['direct_ratio']:.2f}x "
        f"(Celery {c['one_per_call_direct']['tasks_per_s']:,.0f} in the round after), "
        f"CPU {o['one_per_call_direct']['cpu_ms_per_task']:.2f} ms = "
        f"{r['direct_cpu_per_task_ratio']:.2f}x",
        f"celery ({setting} Redis): the HTTP floor's submissions alone (no checks, no "
        f"worker): {o['http_floor']['per_s']:,.0f}/s = {r['floor_ratio']:.2f}x, CPU "
        f"{o['http_floor']['cpu_ms_per_task']:.2f} ms = {r['floor_cpu_per_task_ratio']:.2f}x "
        "Celery's whole task",
        f"celery ({setting} Redis): the same with no HTTP (direct producer and workers): "
        f"{o['one_per_call_mysql']['tasks_per_s']:,.0f} tasks/s = {r['mysql_ratio']:.2f}x "
        f"(Celery {c['one_per_call_mysql']['tasks_per_s']:,.0f} in the round after), "
        f"CPU {o['one_per_call_mysql']['cpu_ms_per_task']:.2f} ms = "
        f"{r['mysql_cpu_per_task_ratio']:.2f}x",
        f"celery ({setting} Redis): Orbit's direct submissions alone (no worker): "
        f"{o['direct_submissions']['per_s']:,.0f}/s, CPU "
        f"{o['direct_submissions']['cpu_ms_per_task']:.2f} ms; so in the no-HTTP run its worker "
        f"side cost {r['worker_side_cpu_ms']:.2f} ms = {r['worker_side_cpu_ratio']:.2f}x "
        "Celery's whole task, and with the HTTP floor's submission "
        f"{r['http_least_cpu_ratio']:.2f}x: the least one task per call over HTTP costs with "
        "Orbit's worker",
        f"celery ({setting} Redis): the SPEC floor's submissions alone (what SPEC asks, no "
        f"worker): {o['spec_floor']['per_s']:,.0f}/s, CPU "
        f"{o['spec_floor']['cpu_ms_per_task']:.2f} ms = "
        f"{r['spec_floor_cpu_per_task_ratio']:.2f}x Celery's whole task; with Orbit's worker "
        f"side {r['spec_least_cpu_ratio']:.2f}x",
        f"celery ({setting} Redis): the SPEC floor's one task per call end to end (its "
        f"submission and a worker round in one request): "
        f"{o['spec_floor_e2e']['tasks_per_s']:,.0f} tasks/s = {r['spec_e2e_ratio']:.2f}x "
        f"(Celery {c['spec_floor_e2e']['tasks_per_s']:,.0f} in the round after), CPU "
        f"{o['spec_floor_e2e']['cpu_ms_per_task']:.2f} ms = {r['spec_e2e_cpu_ratio']:.2f}x; "
        f"its turns carry {o['spec_floor_e2e']['tasks_per_turn']:.1f} tasks (the median of "
        f"three pairs of rounds: "
        f"{', '.join(f'{x:.2f}x' for x in o['spec_floor_e2e']['pair_ratios'])})",
        f"celery ({setting} Redis): submit-to-start p50 at {PACED:.0f} tasks/s: Orbit "
        f"{o['paced']['submit_to_start_p50_ms']:.1f} ms, {o['paced']['tasks_per_s']:,.0f} done "
        f"a second, {o['paced']['cpu_ms_per_task']:.2f} ms a task / Celery "
        f"{c['paced']['submit_to_start_p50_ms']:.1f} ms, {c['paced']['tasks_per_s']:,.0f}, "
        f"{c['paced']['cpu_ms_per_task']:.2f} ms = {r['paced_p50_ratio']:.2f}x (target <= 2)"
        f"{_carried(o['paced'])}",
        f"celery ({setting} Redis): the same with no HTTP: Orbit "
        f"{o['paced_mysql']['submit_to_start_p50_ms']:.1f} ms = {r['paced_mysql_p50_ratio']:.2f}x",
        f"celery ({setting} Redis): the same, the SPEC floor's whole task: "
        f"{o['spec_floor_paced']['submit_to_start_p50_ms']:.1f} ms, the machine "
        f"{o['spec_floor_paced']['cpu_busy_pct']:.0f}% busy / Celery in the round after "
        f"{c['spec_floor_paced']['submit_to_start_p50_ms']:.1f} ms = "
        f"{r['spec_paced_p50_ratio']:.2f}x",
        f"celery ({setting} Redis): submit-to-start p50 at {PACED_LOW:.0f} tasks/s: "
        f"Orbit {o['paced_low']['submit_to_start_p50_ms']:.1f} ms, the machine "
        f"{o['paced_low']['cpu_busy_pct']:.0f}% busy, {o['paced_low']['cpu_ms_per_task']:.2f} "
        f"ms a task / Celery {c['paced_low']['submit_to_start_p50_ms']:.1f} ms, "
        f"{c['paced_low']['cpu_busy_pct']:.0f}% busy, {c['paced_low']['cpu_ms_per_task']:.2f} "
        f"ms a task = {r['paced_low_p50_ratio']:.2f}x{_carried(o['paced_low'])}",
    ]
    for shape in ("batches", "keys1000", "hot10"):
        extra = ""
        if shape != "batches":
            extra = (
                f"; key handoff p50 Orbit {o[shape]['key_handoff_p50_ms']:.1f} / Celery "
                f"{c[shape]['key_handoff_p50_ms']:.1f} ms; Celery overlaps {c[shape]['overlaps']}"
            )
        lines.append(
            f"celery ({setting} Redis): {shape}: Orbit {o[shape]['tasks_per_s']:,.0f} / Celery "
            f"{c[shape]['tasks_per_s']:,.0f} tasks/s = {ratio[shape]:.2f}x (target >= 2.5){extra}"
        )
    print("\n".join(lines), flush=True)
