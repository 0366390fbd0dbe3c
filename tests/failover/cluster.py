"""A replicated MariaDB on loopback for the failover runner: private ``mariadbd`` instances,
each with its own data directory and fixed port, one primary and the rest its replicas.

The topology is the one docs/operations.md ("Topology") supports: GTID with
``gtid_strict_mode``, ROW binary log synced per commit, replicas logging what they apply (so
any of them can be promoted), and lossless semi-synchronous replication (``AFTER_SYNC``, a
timeout long enough never to fall back to asynchronous during a run). ``semi_sync=False``
is the negative control's asynchronous replication.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

import pymysql

from devtools import localdb
from orbit_shell.cli.promote import ahead, gtid_position

APP_USER, APP_PASSWORD = "orbit", "orbit-app"
REPL_USER, REPL_PASSWORD = "repl", "orbit-repl"
# Where the application and replication accounts may connect from: loopback by address (a
# TCP connection from 127.0.0.1 may be matched as 'localhost' or as the address).
HOSTS = ("127.0.0.1", "localhost")


# Made on each server without logging them (the same everywhere, never replicated; a
# rebuilt server gets them again).
ACCOUNTS = ["SET sql_log_bin = 0", "DELETE FROM mysql.global_priv WHERE User = ''"]
for _host in HOSTS:
    ACCOUNTS += [
        f"CREATE USER '{APP_USER}'@'{_host}' IDENTIFIED BY '{APP_PASSWORD}'",
        # Everything on the database, nothing that outlives read_only (the fence).
        f"GRANT ALL PRIVILEGES ON `{localdb.DATABASE}`.* TO '{APP_USER}'@'{_host}'",
        f"GRANT PROCESS, SLAVE MONITOR ON *.* TO '{APP_USER}'@'{_host}'",
        f"CREATE USER '{REPL_USER}'@'{_host}' IDENTIFIED BY '{REPL_PASSWORD}'",
        f"GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'{_host}'",
    ]
ACCOUNTS.append("FLUSH PRIVILEGES")


def replication_options(server_id: int, semi_sync: bool) -> tuple[str, ...]:
    options = (
        f"--server-id={server_id}",
        "--log-bin=binlog",
        "--sync-binlog=1",
        "--log-slave-updates=ON",
        "--gtid-strict-mode=ON",
        "--read-only=ON",  # every server starts as a replica; the first primary is opened
        "--log-bin-trust-function-creators=ON",  # the app account creates new_public_id
        "--skip-slave-start",
        "--slave-net-timeout=2",
    )
    if semi_sync:
        # The master side is switched on only on the primary (Cluster.start, orbit-admin
        # promote): a replica applying with it on would wait for acknowledgements itself.
        options += (
            "--rpl-semi-sync-slave-enabled=ON",
            "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
            # Never fall back to asynchronous in a run: a commit waits for a replica's ack.
            "--rpl-semi-sync-master-timeout=600000",
            "--rpl-semi-sync-master-wait-no-slave=ON",
        )
    return options


class Node:
    """One server of the cluster; ``rebuild`` wipes it and starts it again on its port."""

    def __init__(self, root: Path, index: int, binaries, semi_sync: bool) -> None:
        self.index = index
        self.port = localdb.free_port()
        self.directory = root / f"node{index}"
        self.binaries = binaries
        self.semi_sync = semi_sync
        self.generation = 0
        self.server = self._server()

    def _server(self) -> localdb.PrivateServer:
        self.generation += 1
        return localdb.PrivateServer(
            self.directory,
            self.binaries,
            options=replication_options(self.index * 1000 + self.generation, self.semi_sync),
            port=self.port,
            create_database=False,
        )

    @property
    def where(self) -> str:
        return f"127.0.0.1:{self.port}"

    def admin_dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{localdb.DATABASE}"

    def admin(self) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            autocommit=True,
            cursorclass=pymysql.cursors.DictCursor,
            connect_timeout=3,
        )

    def sql(self, *statements: str) -> list[dict]:
        conn = self.admin()
        try:
            rows: list[dict] = []
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
                    rows = list(cur.fetchall())
            return rows
        finally:
            conn.close()

    def start(self) -> None:
        self.server.start()

    def status(self) -> tuple:
        """What a promotion changes: writable or not, whose replica (threads running), the
        token epoch."""
        [row] = self.sql(
            "SELECT @@global.read_only AS ro, (SELECT epoch FROM "
            f"{localdb.DATABASE}.token_epoch WHERE id = 1) AS epoch"
        )
        slave = self.sql("SHOW SLAVE STATUS")
        replica = (
            (slave[0]["Master_Port"], slave[0]["Slave_IO_Running"], slave[0]["Slave_SQL_Running"])
            if slave
            else None
        )
        return row["ro"], row["epoch"], replica

    def kill(self) -> None:
        """``kill -9``: no shutdown, nothing flushed that was not flushed already."""
        pid = self.server._pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if self.server.process is not None and self.server.process.pid == pid:
            self.server.process.wait(10)  # our child: reaped, not left to a finaliser
            return
        deadline = time.monotonic() + 10
        while localdb.alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def rebuild(self) -> None:
        """A failed primary comes back empty, as a new server on the same address (its lost
        writes are gone with its data; a replica then fetches everything from the primary)."""
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.server = self._server()
        self.start()

    def replicate_from(self, primary: Node, from_start: bool = False) -> None:
        statements = ["STOP SLAVE"]
        if from_start:
            statements.append("SET GLOBAL gtid_slave_pos = ''")
        statements += [
            f"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {primary.port}, "
            f"MASTER_USER = '{REPL_USER}', MASTER_PASSWORD = '{REPL_PASSWORD}', "
            "MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
            "START SLAVE",
        ]
        self.sql(*statements)

    def position(self) -> str:
        return self.sql("SELECT @@global.gtid_current_pos AS pos")[0]["pos"]

    def settled_position(self, timeout: float = 10.0) -> str:
        """What this replica has applied once it applied what it received (or ``timeout``
        passed): right after a kill its relay log may hold writes it has not applied yet."""
        deadline = time.monotonic() + timeout
        while True:
            received = self.sql("SHOW SLAVE STATUS")[0]["Gtid_IO_Pos"]
            applied = self.position()
            caught_up = not ahead(gtid_position(received), gtid_position(applied))
            if caught_up or time.monotonic() > deadline:
                return applied
            time.sleep(0.05)


class Cluster:
    """``size`` servers; ``primary`` is the index of the one that takes writes."""

    def __init__(self, root: Path, size: int = 3, semi_sync: bool = True) -> None:
        binaries = localdb.ensure_binaries()
        shutil.rmtree(root, ignore_errors=True)
        self.nodes = [Node(root, i + 1, binaries, semi_sync) for i in range(size)]
        self.primary = 0

    def app_dsn(self) -> str:
        hosts = ",".join(n.where for n in self.nodes)
        return f"mysql://{APP_USER}:{APP_PASSWORD}@{hosts}/{localdb.DATABASE}"

    def start(self) -> None:
        """Accounts made on each server without logging them (the same everywhere, never
        replicated), replicas connected, and only then the first write: under semi-sync a
        commit waits for a replica's acknowledgement."""
        for node in self.nodes:
            node.start()
            node.sql(*ACCOUNTS)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.replicate_from(first, from_start=True)
        self.wait_connected()
        first.sql(
            *(["SET GLOBAL rpl_semi_sync_master_enabled = ON"] if first.semi_sync else []),
            f"CREATE DATABASE `{localdb.DATABASE}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "SET GLOBAL read_only = OFF",
        )
        self.wait_replicas()

    def rebuild(self, index: int) -> None:
        """Bring a failed server back empty, as a replica of the primary (its accounts made
        again: they are local to each server)."""
        node = self.nodes[index]
        node.rebuild()
        node.sql(*ACCOUNTS)
        node.replicate_from(self.nodes[self.primary], from_start=True)

    def wait_connected(self, timeout: float = 30.0) -> None:
        """Until every replica's IO thread is connected to the primary."""
        deadline = time.monotonic() + timeout
        for i in self.replicas():
            while True:
                [status] = self.nodes[i].sql("SHOW SLAVE STATUS")
                if status["Slave_IO_Running"] == "Yes":
                    break
                assert time.monotonic() < deadline, f"replica {i} not connected: {status}"
                time.sleep(0.1)

    def wait_replicas(self, timeout: float = 60.0) -> None:
        """Until every replica has applied all the primary wrote."""
        target = self.nodes[self.primary].position()
        for i, node in enumerate(self.nodes):
            if i == self.primary:
                continue
            [row] = node.sql(f"SELECT MASTER_GTID_WAIT('{target}', {timeout}) AS r")
            assert row["r"] == 0, f"replica {node.where} did not catch up with {target}"

    def describe(self) -> list[dict]:
        """Each server's state as the checker last saw it: whether it answers, takes writes,
        replicates and waits for semi-sync acknowledgements (printed when a run ends with
        tasks it could not read, so that a stalled cluster says why)."""
        out = []
        for i, node in enumerate(self.nodes):
            row: dict = {"node": node.where, "primary": i == self.primary}
            try:
                [ro] = node.sql(
                    "SELECT @@global.read_only AS read_only, "
                    "@@global.gtid_current_pos AS gtid, @@global.max_connections AS max_conn"
                )
                row.update(ro)
                status = node.sql(
                    "SHOW GLOBAL STATUS WHERE Variable_name IN ('Threads_connected', "
                    "'Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients', "
                    "'Rpl_semi_sync_master_wait_sessions', 'Rpl_semi_sync_slave_status')"
                )
                row.update({r["Variable_name"]: r["Value"] for r in status})
                slave = node.sql("SHOW SLAVE STATUS")
                if slave:
                    s = slave[0]
                    row["slave"] = {
                        k: s[k]
                        for k in (
                            "Master_Port",
                            "Slave_IO_Running",
                            "Slave_SQL_Running",
                            "Last_IO_Error",
                            "Last_SQL_Error",
                            "Gtid_IO_Pos",
                        )
                    }
            except pymysql.MySQLError as exc:
                row["error"] = repr(exc)
            out.append(row)
        return out

    def replicas(self) -> list[int]:
        return [i for i in range(len(self.nodes)) if i != self.primary]

    def most_advanced_replica(self) -> int:
        """The replica holding the most of the old primary's writes (any acknowledged write
        under semi-sync is on at least one replica, and replicas apply in order), each read
        once it applied what it received: promote compares the others' applied positions
        with the target's after the target applied everything it had."""
        best, best_pos = None, None
        for i in self.replicas():
            pos = gtid_position(self.nodes[i].settled_position())
            if best is None or ahead(pos, best_pos):  # promote's own comparison
                best, best_pos = i, pos
        return best

    def stop(self) -> None:
        for node in self.nodes:
            node.server.stop(timeout=10)
