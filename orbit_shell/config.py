"""Server configuration, read from the environment by the CLIs and passed to factories."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """Settings of one Orbit server process.

    Attributes:
        dsn: ``mysql://user:password@host:port/database`` (``ORBIT_MYSQL_DSN``).
        http_addr: ``host:port`` gunicorn binds (``ORBIT_HTTP_ADDR``).
        max_body_bytes: larger request bodies are 413.
        db_pool_size: idle connections kept per process.
        sweep_interval: seconds between lease sweeps (0 disables the sweeper).
        schedule_interval: seconds between scheduler passes (0 disables the scheduler).
        http_workers / http_threads: gunicorn worker processes and threads per process.
        submit_rate / submit_burst: per-credential submissions per second (and burst) that one
            server process accepts before answering 429; rate 0 disables the guard.
        metrics_token: when set (``ORBIT_METRICS_TOKEN``), ``/metrics`` answers only requests
            bearing it; unset, it is open to whoever reaches the server.
    """

    dsn: str
    http_addr: str = "127.0.0.1:8080"
    max_body_bytes: int = 1024 * 1024
    db_pool_size: int = 16
    sweep_interval: float = 1.0
    schedule_interval: float = 1.0
    http_workers: int = 4
    http_threads: int = 8
    submit_rate: float = 500.0
    submit_burst: int = 1000
    metrics_token: str | None = None

    @classmethod
    def from_env(cls) -> Config:
        dsn = os.environ.get("ORBIT_MYSQL_DSN")
        if not dsn:
            raise SystemExit("orbit: ORBIT_MYSQL_DSN is not set (mysql://user:pass@host:port/db)")
        return cls(
            dsn=dsn,
            http_addr=os.environ.get("ORBIT_HTTP_ADDR", "127.0.0.1:8080"),
            sweep_interval=float(os.environ.get("ORBIT_SWEEP_INTERVAL", "1.0")),
            schedule_interval=float(os.environ.get("ORBIT_SCHEDULE_INTERVAL", "1.0")),
            http_workers=int(os.environ.get("ORBIT_HTTP_WORKERS", "4")),
            http_threads=int(os.environ.get("ORBIT_HTTP_THREADS", "8")),
            submit_rate=float(os.environ.get("ORBIT_SUBMIT_RATE", "500")),
            submit_burst=int(os.environ.get("ORBIT_SUBMIT_BURST", "1000")),
            metrics_token=os.environ.get("ORBIT_METRICS_TOKEN") or None,
        )
