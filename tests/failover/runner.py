"""Failover runner (H1-H3): keyed work through the real server while the primary changes,
again and again, by ``orbit-admin promote``.

A primary and two replicas (tests/failover/cluster.py) under semi-synchronous replication;
`orbit` with the three servers in its DSN; SDK worker processes writing through a fenced store
on a server of its own; producers submitting through the API with Idempotency-Keys. The first
change is a switchover (the old primary answers: promote fences it and waits for all it
wrote), the others ``kill -9`` of the primary; each time the most advanced replica is
promoted, the other replica follows it, and the old primary comes back empty as a replica.
The checker then reads the workers' records, the producers' acknowledgements and the last
primary: per key the tokens in the order their holders started never repeat or go back, the
store accepted only rising tokens, no acknowledged submission is missing, and every task
settled.

The negative control runs the same with asynchronous replication, the replicas' IO threads
stopped before the kill and the promotion done without raising the epoch: the checker must
report regressions there, or the runner fails (a checker that cannot fail proves nothing).

    python -m tests.failover.runner [--long] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from devtools import localdb
from orbit_shell import errors
from orbit_shell.cli.promote import PromoteError, promote
from orbit_shell.engine import db
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.fence import SqlFencedStore
from orbit_shell.sdk.models import ApiError, SubmitTaskRequest
from tests.acceptance.conftest import launch_orbit, script, stop_orbit
from tests.acceptance.procs import reap, spawn
from tests.failover.cluster import REPL_PASSWORD, REPL_USER, Cluster

ROOT = Path(__file__).resolve().parents[2]


def note(text: str) -> None:
    print(f"failover: {text}", file=sys.stderr, flush=True)


class Producer(threading.Thread):
    """Submits tasks over a few hot keys until stopped; an answer (201/200) is an
    acknowledgement; a failure is retried with the same Idempotency-Key until it is one."""

    def __init__(self, url: str, token: str, queue: str, keys: list[str], pause: float):
        super().__init__(daemon=True)
        self.client = Client(url, token, timeout=5, retries=5)
        self.queue, self.keys, self.pause = queue, keys, pause
        self.acknowledged: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            idem = secrets.token_hex(8)
            request = SubmitTaskRequest(
                queue_id=self.queue,
                handler="object.update",
                handler_version="v1",
                payload_version="v1",
                payload={"n": n},
                concurrency_key=self.keys[n % len(self.keys)],
            )
            while not self.stopped.is_set():
                try:
                    self.acknowledged.append(self.client.submit_task(idem, request).task.task_id)
                    break
                except ApiError:
                    time.sleep(0.2)  # a switch in progress: the same key again
            n += 1
            time.sleep(self.pause)


class Run:
    def __init__(self, work: Path, semi_sync: bool, control: bool) -> None:
        self.work = work
        self.control = control
        self.cluster = Cluster(work / "cluster", semi_sync=semi_sync)
        self.fence_server = localdb.PrivateServer(work / "fence", localdb.ensure_binaries())
        self.kills: list[float] = []
        self.epochs: list[int] = []  # the new primary's epoch after each failover
        self.epoch_file = work / "epoch.json"

    # Setup ------------------------------------------------------------------------------------
    def start(self, workers: int) -> None:
        note("starting the cluster")
        self.cluster.start()
        note("cluster up; migrating, bootstrapping, starting orbit")
        self.fence_dsn = self.fence_server.start()
        dsn = self.cluster.app_dsn()
        env = dict(os.environ, ORBIT_MYSQL_DSN=dsn)
        subprocess.run(
            [script("orbit-migrate"), "up"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        creds = self.work / "creds.json"
        subprocess.run(
            [
                script("orbit-admin"),
                "bootstrap",
                "--application",
                "failover",
                "--namespace",
                "ns",
                "--environment",
                "test",
                "--queue",
                "default",
                "--worker-access",
                "--output",
                str(creds),
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        doc = json.loads(creds.read_text())
        self.tenant = type("T", (), {"token": doc["token"], "namespace": doc["namespace"]})
        SqlFencedStore(self.fence_dsn, doc["namespace"]).ensure_schema()
        self.server = launch_orbit(dsn, self.work / "orbit.log", ORBIT_SWEEP_INTERVAL="0.3")
        self.client = Client(self.server.url, doc["token"], retries=10)
        self.queue = self.client.create_queue("failover", lease_seconds=3).queue_id
        self.workers = [
            spawn(self.server.url, self.tenant, self.queue, self.fence_dsn, sleep=0.02)
            for _ in range(workers)
        ]

    # Faults ------------------------------------------------------------------------------------
    def failover(self, kill: bool = True) -> None:
        """``kill``: ``kill -9`` of the primary first; otherwise a switchover, where promote
        finds the old primary answering, fences it and waits for everything it wrote."""
        cluster = self.cluster
        old = cluster.primary
        if self.control:  # the replicas miss what the primary writes from now on
            for i in cluster.replicas():
                cluster.nodes[i].sql("STOP SLAVE IO_THREAD")
            time.sleep(1.0)
        self.kills.append(time.monotonic())
        if kill:
            # Chosen after the kill: a replica chosen before it could fall behind the other
            # one by what the dying primary still sent, and promote then refuses it.
            cluster.nodes[old].kill()
        target = cluster.most_advanced_replica()
        others = [cluster.nodes[i].admin_dsn() for i in cluster.replicas() if i != target]
        if self.control:
            cluster.nodes[target].sql("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
            for i in cluster.replicas():
                if i != target:
                    cluster.nodes[i].replicate_from(cluster.nodes[target])
            self.epochs.append(0)
        else:
            self.epochs.append(
                promote(
                    cluster.nodes[target].admin_dsn(),
                    cluster.nodes[old].admin_dsn(),
                    tuple(others),
                    REPL_USER,
                    REPL_PASSWORD,
                    self.epoch_file,
                    30,
                    say=lambda line: None,
                    old_primary_lost=kill,  # killed: it does not answer, and is gone
                )
            )
        cluster.primary = target
        cluster.rebuild(old)

    def promote_unnamed(self) -> bool:
        """A promotion with the old primary alive and named by nobody: refused, and nothing
        changed (the target still a read-only replica receiving from it, the primary writable,
        every epoch as it was). Two writable primaries would grant one key twice."""
        cluster = self.cluster
        target = cluster.most_advanced_replica()
        node, old = cluster.nodes[target], cluster.nodes[cluster.primary]
        before = (node.status(), old.status())
        try:
            promote(node.admin_dsn(), None, (), say=lambda line: None)
            refused = False
        except PromoteError:
            refused = True
        try:
            promote(node.admin_dsn(), None, (), say=lambda line: None, old_primary_lost=True)
            refused_lost = False
        except PromoteError:  # the target still receives from it: it is not lost
            refused_lost = True
        return refused and refused_lost and (node.status(), old.status()) == before

    # Checking --------------------------------------------------------------------------------
    def drain(self, producers: list[Producer], timeout: float) -> dict[str, str]:
        acked = {t for p in producers for t in p.acknowledged}
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                states = self.final_states(acked)
            except errors.Unavailable:
                # No server takes writes this instant (H3: a client is answered 503 and
                # retries); a primary that never comes back leaves every task unread: lost.
                time.sleep(0.5)
                continue
            if all(s in SETTLED for s in states.values()) and len(states) == len(acked):
                break
            time.sleep(0.5)
        return states

    def final_states(self, acked: set[str]) -> dict[str, str]:
        conn = db.connect(self.cluster.app_dsn())
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT public_id, state FROM tasks")
                return {
                    r["public_id"]: r["state"] for r in cur.fetchall() if r["public_id"] in acked
                }
        finally:
            conn.close()

    def records(self) -> tuple[list[tuple], list[tuple]]:
        started, wrote = [], []
        for proc in self.workers:
            for line in list(proc.lines):
                parts = line.split()
                if parts and parts[0] in ("started", "wrote") and len(parts) == 5:
                    row = (parts[3], int(parts[2]), parts[1], float(parts[4]))
                    (started if parts[0] == "started" else wrote).append(row)
        return started, wrote

    def stop(self) -> None:
        reap()
        if getattr(self, "server", None) is not None:
            stop_orbit(self.server)
        self.cluster.stop()
        self.fence_server.stop()


SETTLED = {"SUCCEEDED", "FAILED", "CANCELLED", "DEADLINE_EXCEEDED", "NEEDS_REVIEW"}


def regressions(started: list[tuple]) -> int:
    """Grants whose token repeats an earlier grant's or is below one, per key, in the order
    their holders started (one attempt counts once)."""
    by_key: dict[str, list[tuple]] = defaultdict(list)
    seen: set[str] = set()
    for key, token, attempt, at in started:
        if attempt not in seen:
            seen.add(attempt)
            by_key[key].append((at, token))
    count = 0
    for grants in by_key.values():
        highest = -1
        for _, token in sorted(grants):
            if token <= highest:
                count += 1
            highest = max(highest, token)
    return count


def stale_accepted(wrote: list[tuple]) -> int:
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for key, token, _attempt, at in wrote:
        by_key[key].append((at, token))
    return sum(
        1
        for grants in by_key.values()
        for (_, a), (_, b) in zip(sorted(grants), sorted(grants)[1:], strict=False)
        if b <= a
    )


def scenario(work: Path, failovers: int, control: bool, run_seconds: float) -> dict:
    run = Run(work, semi_sync=not control, control=control)
    try:
        run.start(workers=3)
        producers = [
            Producer(
                run.server.url,
                run.tenant.token,
                run.queue,
                [f"hot/{i}" for i in range(4)],
                pause=0.01,
            )
            for _ in range(2)
        ]
        for p in producers:
            p.start()
        time.sleep(run_seconds)
        unnamed_refused = None if control else run.promote_unnamed()
        for n in range(failovers):
            # The first change of primary is a switchover (the old one fenced, not killed);
            # the control's is a kill, as its replicas are cut off first anyway.
            run.failover(kill=control or n > 0)
            note(f"failover {n + 1} done: primary {run.cluster.nodes[run.cluster.primary].where}")
            time.sleep(run_seconds)
        for p in producers:
            p.stopped.set()
        for p in producers:
            p.join(30)
        states = run.drain(producers, timeout=60 if not control else 10)
        started, wrote = run.records()
        acked = {t for p in producers for t in p.acknowledged}
        cluster = run.cluster.describe()
        first_claims = []
        for kill, epoch in zip(run.kills, run.epochs, strict=True):
            # The first grant of the new primary: in its epoch (the control raises none, so
            # there it is the first start after the kill).
            after = [at for _, token, _, at in started if at > kill and token >> 40 >= epoch]
            if after:
                first_claims.append(min(after) - kill)
        return {
            "mode": "control" if control else "semi-sync",
            "failovers": len(run.kills),
            "unnamed_promotion_refused": unnamed_refused,
            "grants": len({a for _, _, a, _ in started}),
            "regressions": regressions(started),
            "stale_accepted": stale_accepted(wrote),
            "acknowledged": len(acked),
            "acknowledged_lost": len(acked - set(states)),
            "unsettled": sum(1 for s in states.values() if s not in SETTLED),
            # What the servers say when the checker could not read every task: why it stalled
            # (read on every run, so the reading itself is exercised where it passes).
            "cluster": cluster if len(states) < len(acked) else None,
            "kill_to_first_claim_s": {
                "median": round(statistics.median(first_claims), 2) if first_claims else None,
                "max": round(max(first_claims), 2) if first_claims else None,
            },
        }
    finally:
        run.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="20 failovers (default 3)")
    parser.add_argument("--work", type=Path, default=ROOT / ".scratch" / "failover")
    args = parser.parse_args(argv)
    failovers = 20 if args.long else 3
    figures = scenario(args.work / "semi", failovers, control=False, run_seconds=2.0)
    print(json.dumps(figures))
    control = scenario(args.work / "control", 1, control=True, run_seconds=2.0)
    print(json.dumps(control))
    ok = (
        figures["regressions"] == 0
        and figures["stale_accepted"] == 0
        and figures["acknowledged_lost"] == 0
        and figures["unsettled"] == 0
        and figures["unnamed_promotion_refused"]
        and control["regressions"] > 0
    )
    print(
        f"failovers {figures['failovers']}, grants {figures['grants']}, regressions "
        f"{figures['regressions']}, acknowledged submissions lost {figures['acknowledged_lost']}"
        f" of {figures['acknowledged']}, kill to first claim "
        f"{figures['kill_to_first_claim_s']} s, promotion with the old primary alive and "
        f"unnamed refused {figures['unnamed_promotion_refused']}; control: regressions detected "
        f"{control['regressions']} -> {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
