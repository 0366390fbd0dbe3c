"""Server configuration, read from the environment by the CLIs and passed to factories."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from orbit_shell import validation
from orbit_shell.engine import db


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
        db_timeout: seconds a database connection waits for the server to read or answer;
            a request whose server stops answering then gets 503 with Retry-After and the
            server is looked for again.
        cleanup_interval: seconds between the leader's cleanup passes (R3; 0 disables).
        leader_interval: seconds between a standby's bids for the background loops' lock
            (and the leader's checks that it still holds it): the takeover bound (H4).
        metrics_token: when set (``ORBIT_METRICS_TOKEN``), ``/metrics`` answers only requests
            bearing it; unset, it is open to whoever reaches the server.
        public_url: the dashboard's address as browsers see it (``https://orbit.example``);
            a form must come from its origin. Unset: the request's own scheme and host.
        trust_forwarded: 1 when a trusted proxy sets X-Forwarded-Proto / X-Forwarded-Host
            (and X-Forwarded-For for the sign-in limit); 0 (default) ignores them.
        session_secret: mixed into every dashboard session's signature; without it whoever
            reads the credentials table could sign a session.
        session_seconds: how long a dashboard sign-in lasts.
    """

    dsn: str
    http_addr: str = "127.0.0.1:8080"
    max_body_bytes: int = validation.MAX_BODY_BYTES
    db_pool_size: int = 16
    sweep_interval: float = 1.0
    schedule_interval: float = 1.0
    http_workers: int = 4
    submit_rate: float = 500.0
    submit_burst: int = 1000
    http_connections: int = 1000
    longpoll_per_credential: int = 256
    longpoll_max: int = 2048
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    db_max_open: int = 32
    db_timeout: float = db.IO_TIMEOUT
    leader_interval: float = 1.0
    cleanup_interval: float = 60.0
    metrics_token: str | None = None
    public_url: str | None = None
    trust_forwarded: int = 0
    session_secret: str | None = None
    session_seconds: int = 12 * 3600

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """The settings named in ``ENVIRONMENT`` that are set, over the defaults.

        Raises:
            SystemExit: ORBIT_MYSQL_DSN is not set, or a value is not a number, or not more
                than 0 (0 is allowed where it turns something off: ``OFF``).
        """
        environ = os.environ if environ is None else environ
        if not environ.get("ORBIT_MYSQL_DSN"):
            raise SystemExit("orbit: ORBIT_MYSQL_DSN is not set (mysql://user:pass@host:port/db)")
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, object] = {}
        for name, (attribute, _help) in ENVIRONMENT.items():
            text = environ.get(name)
            if text is None or text == "":
                continue
            kind = kinds[attribute]
            try:
                value = int(text) if kind == "int" else float(text) if kind == "float" else text
            except ValueError:
                raise SystemExit(f"orbit: {name}={text!r} is not a number") from None
            if kind in ("int", "float") and value <= 0 and (value < 0 or attribute not in OFF):
                raise SystemExit(
                    f"orbit: {name}={text!r} must be "
                    + ("0 or more" if attribute in OFF else "more than 0")
                )
            values[attribute] = value
        return cls(**values)


# The environment ``orbit`` reads: variable -> (Config attribute, what it sets). ``orbit --help``
# prints this table with each default.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "ORBIT_MYSQL_DSN": ("dsn", "mysql://user:password@host:port/database (required)"),
    "ORBIT_HTTP_ADDR": ("http_addr", "host:port to listen on"),
    "ORBIT_HTTP_WORKERS": ("http_workers", "gunicorn worker processes"),
    "ORBIT_HTTP_CONNECTIONS": ("http_connections", "connections one worker process serves"),
    "ORBIT_SWEEP_INTERVAL": ("sweep_interval", "seconds between lease sweeps (0: none)"),
    "ORBIT_SCHEDULE_INTERVAL": ("schedule_interval", "seconds between scheduler passes (0: none)"),
    "ORBIT_SUBMIT_RATE": ("submit_rate", "submissions/s per credential and process (0: no cap)"),
    "ORBIT_SUBMIT_BURST": ("submit_burst", "submissions a credential may send at once"),
    "ORBIT_LONGPOLL_PER_CREDENTIAL": ("longpoll_per_credential", "long polls of one credential"),
    "ORBIT_LONGPOLL_MAX": ("longpoll_max", "long polls in all"),
    "ORBIT_HEADER_TIMEOUT": ("header_timeout", "seconds to send a request's headers"),
    "ORBIT_BODY_TIMEOUT": ("body_timeout", "seconds to send a request's body (then 408)"),
    "ORBIT_DB_MAX_OPEN": ("db_max_open", "database connections per worker process"),
    "ORBIT_DB_TIMEOUT": ("db_timeout", "seconds a database connection waits for an answer"),
    "ORBIT_CLEANUP_INTERVAL": ("cleanup_interval", "seconds between cleanup passes (0: none)"),
    "ORBIT_LEADER_INTERVAL": ("leader_interval", "seconds between bids to lead the sweeps"),
    "ORBIT_METRICS_TOKEN": ("metrics_token", "bearer token /metrics asks for (unset: open)"),
    "ORBIT_PUBLIC_URL": ("public_url", "the dashboard's public address; forms must come from it"),
    "ORBIT_TRUST_FORWARDED": ("trust_forwarded", "1: trust the proxy's X-Forwarded-* headers"),
    "ORBIT_SESSION_SECRET": ("session_secret", "secret mixed into dashboard session signatures"),
    "ORBIT_SESSION_SECONDS": ("session_seconds", "seconds a dashboard sign-in lasts"),
}


# Where 0 turns the thing off.
OFF = {
    "sweep_interval",
    "schedule_interval",
    "cleanup_interval",
    "submit_rate",
    "trust_forwarded",
}


def environment_help() -> str:
    """The ENVIRONMENT table as text, each variable with its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    lines = ["environment:"]
    for name, (attribute, text) in ENVIRONMENT.items():
        default = defaults[attribute]
        shown = "" if default in (dataclasses.MISSING, None) else f" (default {default})"
        lines.append(f"  {name:<31} {text}{shown}")
    return "\n".join(lines)
