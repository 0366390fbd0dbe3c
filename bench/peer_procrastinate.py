"""Peer measurement: Procrastinate on the local PostgreSQL draining no-op jobs.

Jobs are deferred first, then one worker with the given concurrency runs until the queue is
empty (`wait=False`); the figure is jobs drained per second. With `keys`, every job carries
`lock=<key>` (Procrastinate's per-key exclusion). Needs `pip install "procrastinate[psycopg]"`
and a PostgreSQL server (PEER_PG_DSN, default postgresql://postgres@127.0.0.1/postgres); this
is a benchmark dependency only, not part of Orbit.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time


async def drain(jobs: int, keys: int, concurrency: int) -> dict:
    import procrastinate
    import psycopg

    admin = os.environ.get("PEER_PG_DSN", "postgresql://postgres@127.0.0.1/postgres")
    name = "peer_" + secrets.token_hex(4)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = admin.rsplit("/", 1)[0] + "/" + name
    try:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

        @app.task(name="noop", queue="bench")
        async def noop(n: int) -> None:
            return None

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            if keys:
                for i in range(jobs):
                    await noop.configure(lock=f"key-{i % keys}").defer_async(n=i)
            else:
                for start in range(0, jobs, 500):
                    await noop.batch_defer_async(
                        *({"n": i} for i in range(start, min(jobs, start + 500)))
                    )
            started = time.monotonic()
            await app.run_worker_async(
                queues=["bench"], concurrency=concurrency, wait=False, install_signal_handlers=False
            )
            elapsed = time.monotonic() - started
        return {
            "peer": "procrastinate",
            "jobs": jobs,
            "keys": keys,
            "concurrency": concurrency,
            "jobs_per_s": jobs / elapsed,
        }
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def run(jobs: int, keys: int, concurrency: int) -> dict:
    return asyncio.run(drain(jobs, keys, concurrency))
