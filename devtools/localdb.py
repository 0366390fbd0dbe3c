"""A private MariaDB server for the scenario and the tests.

This is the one module that knows how to find, install and run a throw-away MariaDB: its own data
directory and port under the project's scratch folder, stopped afterwards. It is used only when
``ORBIT_MYSQL_DSN`` is not set. The pytest fixtures ask it for the binaries (installing them when
missing) and hand them to pytest-mysql's ``mysql_proc``.

Command line (used by ``scripts/scenario``)::

    python -m devtools.localdb ensure            # binaries present (apt when root), prints paths
    python -m devtools.localdb start DIR         # prints the DSN of a fresh server in DIR
    python -m devtools.localdb stop DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

APT_PACKAGES = ("mariadb-server", "mariadb-client")
DATABASE = "orbit"

# Server options shared by the scenario and the tests. ROW binlog format is what the claim
# path's READ COMMITTED + SKIP LOCKED needs if binary logging is ever switched on.
SERVER_OPTIONS = (
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_bin",
    "--binlog-format=ROW",
    "--max-connections=500",
    "--innodb-buffer-pool-size=256M",
)
# Binary logging as MySQL 8 has it by default (and replication needs it): every commit also
# syncs the binlog. Off unless asked (bench --binlog): it costs commits, not correctness.
BINLOG_OPTIONS = (
    "--log-bin=binlog",
    "--sync-binlog=1",
    "--server-id=1",
    "--max-binlog-size=64M",
    "--binlog-expire-logs-seconds=3600",
)


class LocalDbError(RuntimeError):
    """The private database could not be provided; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Paths of the MariaDB programs a private server needs."""

    mysqld: str
    mysqld_safe: str
    install_db: str
    admin: str


def _which(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or next(
            (str(p) for d in ("/usr/sbin", "/usr/bin") if (p := Path(d, name)).exists()), None
        )
        if path:
            return path
    return None


def find_binaries() -> Binaries | None:
    """Return the server binaries, or None when any of them is missing."""
    found = (
        _which("mariadbd", "mysqld"),
        _which("mariadbd-safe", "mysqld_safe"),
        _which("mariadb-install-db", "mysql_install_db"),
        _which("mariadb-admin", "mysqladmin"),
    )
    if None in found:
        return None
    return Binaries(*found)  # type: ignore[arg-type]


def ensure_binaries() -> Binaries:
    """Return the binaries, installing MariaDB with apt when missing and running as root.

    Raises:
        LocalDbError: when the server is missing and cannot be installed from here.
    """
    found = find_binaries()
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise LocalDbError(
            "MariaDB server not found. Install it (Debian: `sudo apt-get install -y "
            + " ".join(APT_PACKAGES)
            + "`) or set ORBIT_MYSQL_DSN to an existing MySQL 8.0+/MariaDB 10.6+ database."
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("orbit: installing " + " ".join(APT_PACKAGES) + " with apt-get", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=sys.stderr)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES],
        check=True,
        env=env,
        stdout=sys.stderr,
    )
    found = find_binaries()
    if not found:
        raise LocalDbError("apt-get installed MariaDB but its binaries were not found on PATH")
    return found


def isolated_binaries(binaries: Binaries, directory: Path) -> Binaries:
    """Wrap the scripts that read option files so they run with ``--no-defaults``.

    The system's my.cnf (Debian: ``user = mysql``, a fixed datadir and port) must not leak into
    a private server; pytest-mysql builds its own command lines, so it gets wrappers whose first
    argument is ``--no-defaults`` (which must come first).
    """
    directory.mkdir(parents=True, exist_ok=True)
    wrapped = {}
    for name in ("mysqld_safe", "install_db"):
        path = directory / name
        path.write_text(f'#!/bin/sh\nexec {getattr(binaries, name)} --no-defaults "$@"\n')
        path.chmod(0o755)
        wrapped[name] = str(path)
    return dataclasses.replace(binaries, **wrapped)


def free_port() -> int:
    """Ask the kernel for a free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateServer:
    """A MariaDB server in its own directory, reachable on a unix socket and 127.0.0.1."""

    def __init__(
        self,
        directory: Path,
        binaries: Binaries,
        binlog: bool = False,
        environment: dict[str, str] | None = None,
        options: tuple[str, ...] = (),
        port: int | None = None,
        create_database: bool = True,
    ) -> None:
        """``environment``: variables added to the server's own (the benchmark's emulated slow
        disk preloads a library through it, bench/slowdisk.py). ``options``: more server
        options (replication, tests/failover); ``port``: a fixed port (a server rebuilt in
        place keeps its address); ``create_database``: create the orbit database at start
        (a replica receives it from its primary instead)."""
        self.directory = directory.resolve()
        self.binaries = binaries
        self.options = SERVER_OPTIONS + (BINLOG_OPTIONS if binlog else ()) + tuple(options)
        self.fixed_port = port
        self.create_database = create_database
        self.environment = dict(environment or {})
        self.datadir = self.directory / "data"
        self.socket = self.directory / "mysqld.sock"
        self.pidfile = self.directory / "mysqld.pid"
        self.logfile = self.directory / "mysqld.log"
        self.portfile = self.directory / "port"
        self.process: subprocess.Popen | None = None

    def dsn(self) -> str:
        port = int(self.portfile.read_text())
        return f"mysql://root@127.0.0.1:{port}/{DATABASE}?unix_socket={self.socket}"

    def start(self, timeout: float = 60.0) -> str:
        """Initialise (first time) and start the server; return its DSN."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.running():
            return self.dsn()
        user = ["--user=root"] if os.geteuid() == 0 else []
        if not (self.datadir / "mysql").exists():
            shutil.rmtree(self.datadir, ignore_errors=True)
            subprocess.run(
                [
                    self.binaries.install_db,
                    "--no-defaults",
                    f"--datadir={self.datadir}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    *user,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        port = self.fixed_port or free_port()
        self.portfile.write_text(str(port))
        log_offset = self.logfile.stat().st_size if self.logfile.exists() else 0
        self.process = subprocess.Popen(
            [
                self.binaries.mysqld,
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--socket={self.socket}",
                f"--pid-file={self.pidfile}",
                f"--log-error={self.logfile}",
                f"--port={port}",
                "--bind-address=127.0.0.1",
                *user,
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **self.environment},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Connect only once this start has logged readiness: a handshake against a server
            # that is still starting fails in ways that leak the client's socket.
            if self._logged_ready(log_offset) and self._ping():
                if self.create_database:
                    self._create_database()
                return self.dsn()
            if self.process.poll() is not None:
                raise LocalDbError(f"private MariaDB exited during start; see {self.logfile}")
            time.sleep(0.2)
        raise LocalDbError(f"private MariaDB did not start within {timeout}s; see {self.logfile}")

    def _logged_ready(self, offset: int) -> bool:
        try:
            with open(self.logfile, "rb") as log:
                log.seek(offset)
                return b"ready for connections" in log.read()
        except FileNotFoundError:
            return False

    def _ping(self) -> bool:
        import pymysql

        try:
            pymysql.connect(unix_socket=str(self.socket), user="root", connect_timeout=2).close()
            return True
        except pymysql.MySQLError:
            return False

    def _create_database(self) -> None:
        import pymysql

        conn = pymysql.connect(unix_socket=str(self.socket), user="root")
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE DATABASE IF NOT EXISTS `{DATABASE}` "
                    "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                )
        finally:
            conn.close()

    def running(self) -> bool:
        pid = self._pid()
        return pid is not None and self._alive(pid) and self._ping()

    def _pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); keep its data."""
        pid = self._pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._alive(pid):
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        self._alive(pid)

    def _alive(self, pid: int) -> bool:
        # Our own child is polled through its Popen (which reaps it); another process's server
        # through its pid.
        if self.process is not None and self.process.pid == pid:
            return self.process.poll() is None
        return alive(pid)


def alive(pid: int) -> bool:
    """True while ``pid`` runs; reaps it first when it is our own exited child (a zombie)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # not our child: the server was started by another process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.localdb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ensure", help="make sure the MariaDB binaries are installed")
    for name in ("start", "stop"):
        sub.add_parser(name).add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    try:
        binaries = ensure_binaries()
        if args.command == "ensure":
            print(dataclasses.asdict(binaries))
        elif args.command == "start":
            print(PrivateServer(args.directory, binaries).start())
        else:
            PrivateServer(args.directory, binaries).stop()
    except (LocalDbError, subprocess.CalledProcessError) as exc:
        print(f"orbit: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
