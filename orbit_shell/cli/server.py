"""``orbit``: the API server under gunicorn, plus the lease sweeper and the scheduler in every
worker process. The workers' metrics meet in one directory, so ``/metrics`` reports the whole
server whichever worker answers the scrape.

Refuses to start when the database schema is not exactly the version this code ships (K11).
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import logging
import math
import os
import shutil
import sys
import tempfile

from gunicorn.app.base import BaseApplication

from orbit_shell import logs
from orbit_shell.engine import schema
from orbit_shell.server.config import Config, environment_help

log = logging.getLogger("orbit.server")


def version() -> str:
    """The installed package's version."""
    try:
        return importlib.metadata.version("orbit-shell")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


METRICS_PREFIX = "orbit-metrics-"  # + "<pid>-<random>": the private metrics directory
WAKE_PREFIX = "orbit-wake-"  # + "<pid>-<random>": the worker processes' wakeup sockets


class OrbitServer(BaseApplication):
    """gunicorn application running ``create_app`` in gevent workers
    (``api.gevent_worker.OrbitWorker``): a long-poll claim or a slow client waits in a
    greenlet, never holding a thread other requests need (L1)."""

    def __init__(
        self, config: Config, metrics_dir: str | None = None, wake_dir: str | None = None
    ) -> None:
        self.config = config
        self.metrics_dir = metrics_dir  # made by main(): removed when the server exits
        self.wake_dir = wake_dir  # likewise: one socket per worker process (server.wakeups)
        super().__init__()

    def load_config(self) -> None:
        self.cfg.set("bind", self.config.http_addr)
        self.cfg.set("workers", self.config.http_workers)
        self.cfg.set("worker_class", "orbit_shell.server.gevent_worker.OrbitWorker")
        self.cfg.set("worker_connections", self.config.http_connections)
        # Bounds every request's header read, not only a kept-alive connection's wait.
        self.cfg.set("keepalive", math.ceil(self.config.header_timeout))
        # gunicorn's control socket sits at one path per user by default: a second server on
        # the host took it over, and stopping either removed the other's. Orbit uses none.
        if "control_socket_disable" in self.cfg.settings:  # gunicorn 25 and later
            self.cfg.set("control_socket_disable", True)
        self.cfg.set("timeout", 60)
        self.cfg.set("graceful_timeout", 20)
        self.cfg.set("post_worker_init", self._post_worker_init)
        self.cfg.set("on_exit", self._on_exit)

    def _on_exit(self, server) -> None:
        for made in (self.metrics_dir, self.wake_dir):
            if made:
                shutil.rmtree(made, ignore_errors=True)

    def _post_worker_init(self, worker) -> None:
        # Imported here, in the worker after gevent patched it: a class made from
        # threading.Thread in the arbiter would run as an OS thread beside the event loop.
        from prometheus_client import Counter

        from orbit_shell.server.cleanup import Cleaner
        from orbit_shell.server.leader import Leadership
        from orbit_shell.server.schedules import Scheduler
        from orbit_shell.server.sweeper import Sweeper

        intervals = (
            self.config.sweep_interval,
            self.config.schedule_interval,
            self.config.cleanup_interval,
        )
        if all(i <= 0 for i in intervals):
            return
        # One leader per database runs the loops; every worker of every server stands by (H4).
        leadership = Leadership(self.config.dsn, self.config.leader_interval)
        leadership.start()
        if self.config.sweep_interval > 0:
            Sweeper(
                self._database(),
                self.config.sweep_interval,
                active=leadership.leading,
            ).start()
        if self.config.schedule_interval > 0:
            Scheduler(
                self._database(),
                self.config.schedule_interval,
                active=leadership.leading,
            ).start()
        if self.config.cleanup_interval > 0:
            deleted = Counter(
                "orbit_cleanup_rows_deleted",
                "Rows the retention cleanup deleted, per table",
                ["table"],
                registry=None,  # exported through the server's multiprocess directory
            )
            Cleaner(
                self._database(),
                self.config.cleanup_interval,
                active=leadership.leading,
                deleted=lambda table, rows: deleted.labels(table).inc(rows),
            ).start()

    def _database(self):
        from orbit_shell.engine.db import Database

        return Database(
            self.config.dsn,
            pool_size=2,
            routines=schema.version(),
            io_timeout=self.config.db_timeout,
        )

    def load(self):
        from orbit_shell.server.app import create_app
        from orbit_shell.server.wakeups import Wakeups

        return create_app(self.config, wakeups=Wakeups(self.wake_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="orbit",
        description="The Orbit API server: gunicorn (gevent workers) serving the HTTP API, with "
        "the lease sweeper and the scheduler. Configured by the environment.",
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"orbit {version()}")
    parser.parse_args(argv)
    logs.configure()
    config = Config.from_env()
    try:
        schema.check(config.dsn)
    except schema.SchemaMismatch as exc:
        print(f"orbit: refusing to start: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - CLI boundary: say why, exit non-zero
        print(f"orbit: cannot reach the database: {exc}", file=sys.stderr)
        return 1
    log.info("starting", extra={"action": "server.start", "addr": config.http_addr})
    _remove_orphaned_dirs()
    wake_dir = tempfile.mkdtemp(prefix=f"{WAKE_PREFIX}{os.getpid()}-")
    OrbitServer(config, _metrics_dir(), wake_dir).run()
    return 0


def _metrics_dir() -> str | None:
    """Point prometheus_client's multiprocess mode at one directory before the workers fork
    (and import it): each worker writes its samples there and a scrape adds them up. Without
    it every worker counts alone and a scrape sees whichever worker answered. A directory
    named by ``PROMETHEUS_MULTIPROC_DIR`` is emptied of a previous run's files (they would
    add to this run's counts); otherwise a private one is made and returned for removal."""
    named = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if named:
        os.makedirs(named, exist_ok=True)
        for stale in glob.glob(os.path.join(named, "*.db")):
            os.remove(stale)
        return None
    made = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made


def _remove_orphaned_dirs() -> None:
    """Remove the private metrics and wakeup directories of this user's servers that are
    gone: one killed with SIGKILL never ran ``on_exit``. A directory's name carries its
    server's pid."""
    found = [
        (path, prefix)
        for prefix in (METRICS_PREFIX, WAKE_PREFIX)
        for path in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*-*"))
    ]
    for path, prefix in found:
        pid = os.path.basename(path)[len(prefix) :].split("-", 1)[0]
        try:
            if not pid.isdigit() or os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed an orphaned directory", extra={"action": "server.start"})
        except OSError:
            continue  # alive under another user (EPERM), or already gone
