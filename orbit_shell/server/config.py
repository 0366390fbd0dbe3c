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
        http_workers: gunicorn worker processes.
        submit_rate / submit_burst: per-credential submissions per second (and burst) that one
            server process accepts before answering 429; rate 0 disables the guard.
        http_connections: connections one worker process serves at once (gevent); beyond it
            the process stops accepting until one ends.
        longpoll_per_credential / longpoll_max: long polls (claims with wait_ms > 0) the
            server holds at once for one credential / in all, split evenly over its worker
            processes; beyond either a claim is 429 with Retry-After (L1).
        header_timeout / body_timeout: seconds a client may take to send a request's headers
            / its body; a slower client is cut off (408 for the body).
        db_max_open: database connections one process opens at most; a call waits for one.
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
    submit_rate: float = 500.0
    submit_burst: int = 1000
    http_connections: int = 1000
    longpoll_per_credential: int = 64
    longpoll_max: int = 1024
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    db_max_open: int = 32
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
            submit_rate=float(os.environ.get("ORBIT_SUBMIT_RATE", "500")),
            submit_burst=int(os.environ.get("ORBIT_SUBMIT_BURST", "1000")),
            http_connections=int(os.environ.get("ORBIT_HTTP_CONNECTIONS", "1000")),
            longpoll_per_credential=int(os.environ.get("ORBIT_LONGPOLL_PER_CREDENTIAL", "64")),
            longpoll_max=int(os.environ.get("ORBIT_LONGPOLL_MAX", "1024")),
            header_timeout=float(os.environ.get("ORBIT_HEADER_TIMEOUT", "10")),
            body_timeout=float(os.environ.get("ORBIT_BODY_TIMEOUT", "30")),
            db_max_open=int(os.environ.get("ORBIT_DB_MAX_OPEN", "32")),
            metrics_token=os.environ.get("ORBIT_METRICS_TOKEN") or None,
        )
