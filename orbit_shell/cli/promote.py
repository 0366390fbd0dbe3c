"""``orbit-admin promote``: make a replica the primary without letting a token go back (H1).

Steps, each printed as it is done:

0. Before anything changes: every argument and the ``--epoch-file`` are read and checked,
   and the old primary is named (``--old-primary``) or stated gone (``--old-primary-lost``).
1. The target must be a replica (replication configured) of an Orbit database (its
   ``token_epoch`` and ``orbit_meta`` tables); with ``--old-primary``, of that server.
2. The old primary, when it answers, is fenced (``read_only``, its client connections
   ended), and the target waits until it has everything the old primary wrote. When it does
   not answer, promotion goes on only with ``--old-primary-lost`` and only while the target
   receives nothing from it; the target applies what it has received. No other replica named
   with ``--replica`` may be ahead of the target.
3. Replication is stopped and forgotten on the target, its token epoch is raised above every
   epoch seen (the target's, the old primary's, the other replicas', the last one written to
   ``--epoch-file``), and only then is ``read_only`` turned off: the first write the new
   primary takes already grants tokens above every earlier one.
4. The other replicas replicate from the new primary (``--replica``, with ``--repl-user``).

The account in the DSNs needs the privileges to manage replication and ``read_only``
(``SUPER`` or, on MariaDB 10.5+, ``REPLICATION SLAVE ADMIN``, ``READ_ONLY ADMIN`` and
``BINLOG ADMIN``). The application's own account must not hold ``READ_ONLY ADMIN``, or the
fence does not hold it off (docs/operations.md, "Topology").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from orbit_shell.engine import db

EPOCH_MAX = 2**24 - 1


class PromoteError(RuntimeError):
    """Promotion refused or failed; the message says why and what to do."""


def gtid_position(text: str) -> dict[int, int]:
    """``'0-1-100,1-2-7'`` as {domain: sequence number} (MariaDB GTID positions)."""
    out: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        domain, _server, seq = part.split("-")
        out[int(domain)] = max(out.get(int(domain), 0), int(seq))
    return out


def ahead(a: dict[int, int], b: dict[int, int]) -> bool:
    """Whether position ``a`` holds a transaction ``b`` does not."""
    return any(seq > b.get(domain, 0) for domain, seq in a.items())


def _admin(dsn: str, timeout: int = 3) -> pymysql.connections.Connection:
    return db.connect(dsn, connect_timeout=timeout, read_timeout=120)


def _one(conn, sql: str, args: Any = None) -> dict[str, Any] | None:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def _epoch(conn) -> int:
    row = _one(conn, "SELECT epoch FROM token_epoch WHERE id = 1")
    return int(row["epoch"]) if row else 0


def _reachable(dsn: str | None, say: Callable[[str], None], what: str):
    if not dsn:
        return None
    try:
        return _admin(dsn, timeout=2)
    except pymysql.MySQLError as exc:
        say(f"{what} {_where(dsn)} does not answer ({exc.args[0]}): left as it is")
        return None


def _where(dsn: str) -> str:
    settings = db.parse_dsn(dsn)
    return f"{settings['host']}:{settings['port']}"


def read_epoch_file(path: Path | None) -> int | None:
    """The epoch last written to ``--epoch-file`` (None when there is no file yet), checked
    before promote changes anything: a file it cannot read must not be found half-way, after
    the old primary was fenced."""
    if path is None or not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        epoch = doc["epoch"]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise PromoteError(f"--epoch-file {path} is unreadable ({exc!r}): refusing") from None
    if type(epoch) is not int or not 0 <= epoch <= EPOCH_MAX:
        raise PromoteError(f"--epoch-file {path}: epoch {epoch!r} is not 0..{EPOCH_MAX}")
    return epoch


def _check_arguments(target, old_primary, replicas, repl_user, wait_seconds, lost) -> None:
    if not old_primary and not lost:
        raise PromoteError(
            "name the old primary with --old-primary, so that it is fenced first, or state "
            "that it is gone for good with --old-primary-lost: refusing (two writable "
            "primaries would grant one key twice)"
        )
    if replicas and not repl_user:
        raise PromoteError("--repl-user is needed to point replicas at the new primary")
    if wait_seconds < 1:
        raise PromoteError("--wait must be at least 1 second")
    _check_dsns(target, old_primary, *replicas)


def _check_dsns(*dsns: str | None) -> None:
    for dsn in dsns:
        if dsn is not None:
            try:
                db.parse_dsn(dsn)
            except ValueError as exc:
                raise PromoteError(f"{dsn!r}: {exc}") from None


def fence(conn, say: Callable[[str], None], where: str) -> None:
    """Make the old primary read-only and end its client connections: a server still
    connected to it then meets a refused write or a dropped connection and looks for the new
    primary (H3), instead of writing on beside it. Replication threads stay."""
    with conn.cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
        cur.execute(
            "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() "
            "AND user NOT IN ('system user', 'event_scheduler') "
            "AND command NOT IN ('Daemon', 'Binlog Dump', 'Binlog Dump GTID')"
        )
        ended = 0
        for row in cur.fetchall():
            try:
                cur.execute("KILL CONNECTION %s", (row["id"],))
                ended += 1
            except pymysql.MySQLError:  # gone by itself meanwhile
                pass
    say(f"fenced the old primary {where}: read_only = 1, {ended} client connections ended")


def _source_silent(conn, source: str, seconds: float = 3.0) -> None:
    """Refuse when the target still receives from its source: the operator says it is lost,
    the replica says it is alive. A killed server's replication connection drops at once."""
    deadline = time.monotonic() + seconds
    while _one(conn, "SHOW SLAVE STATUS")["Slave_IO_Running"] == "Yes":
        if time.monotonic() > deadline:
            raise PromoteError(
                f"the target still receives from {source}, so the old primary is alive: "
                "refusing (name it with --old-primary, and promote fences it)"
            )
        time.sleep(0.1)


def promote(
    target: str,
    old_primary: str | None = None,
    replicas: tuple[str, ...] = (),
    repl_user: str | None = None,
    repl_password: str = "",
    epoch_file: Path | None = None,
    wait_seconds: int = 30,
    say: Callable[[str], None] = print,
    old_primary_lost: bool = False,
) -> int:
    """Promote ``target``; return its new token epoch.

    Every argument, the epoch file and the target are checked before anything is changed.
    The old primary is fenced when it answers; when it does not, only ``old_primary_lost``
    (the operator's word that it is gone) lets the promotion go on, and not while the target
    still receives from it.
    """
    _check_arguments(target, old_primary, replicas, repl_user, wait_seconds, old_primary_lost)
    written_epoch = read_epoch_file(epoch_file)
    conn = _admin(target)
    others: list[tuple[str, Any]] = []
    try:
        status = _one(conn, "SHOW SLAVE STATUS")
        if status is None:
            raise PromoteError(f"{_where(target)} is not a replica: refusing to promote it")
        target_epoch = _orbit_epoch(conn, target)
        source = f"{status['Master_Host']}:{status['Master_Port']}"
        if old_primary and source != _where(old_primary):
            raise PromoteError(
                f"{_where(target)} replicates from {source}, not from {_where(old_primary)}: "
                "refusing (name the server it replicates from)"
            )
        epochs = [target_epoch] + ([written_epoch] if written_epoch is not None else [])
        old = _reachable(old_primary, say, "old primary")
        if old is None and not old_primary_lost:
            raise PromoteError(
                f"the old primary {_where(old_primary)} does not answer, so it cannot be "
                "fenced: refusing (if it is gone for good, say so with --old-primary-lost)"
            )
        if old is None:
            _source_silent(conn, source)
            say(f"the old primary {source} is gone (--old-primary-lost)")
        else:
            try:
                fence(old, say, _where(old_primary))
                epochs.append(_epoch(old))
                final = _one(old, "SELECT @@global.gtid_binlog_pos AS pos")["pos"]
            finally:
                old.close()
            if not _caught_up(conn, final, wait_seconds):
                raise PromoteError(
                    f"{_where(target)} did not receive the old primary's last writes ({final}) "
                    f"within {wait_seconds}s; it stays a replica (the old primary is fenced)"
                )
            say(f"the target has every write of the old primary (gtid {final})")
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE IO_THREAD")
        received = _one(conn, "SHOW SLAVE STATUS")["Gtid_IO_Pos"]
        if not _caught_up(conn, received, wait_seconds):
            raise PromoteError(
                f"{_where(target)} did not apply what it received ({received}) within "
                f"{wait_seconds}s; its IO thread is stopped, its SQL thread still runs"
            )
        mine = gtid_position(_one(conn, "SELECT @@global.gtid_current_pos AS pos")["pos"])
        say(f"applied everything received (gtid {received or 'none'})")
        for dsn in replicas:
            other = _reachable(dsn, say, "replica")
            if other is None:
                continue
            others.append((dsn, other))
            pos = gtid_position(_one(other, "SELECT @@global.gtid_current_pos AS pos")["pos"])
            epochs.append(_epoch(other))
            if ahead(pos, mine):
                raise PromoteError(
                    f"replica {_where(dsn)} has writes {_where(target)} lacks: promote it instead"
                )
        new_epoch = max(epochs) + 1
        if new_epoch > EPOCH_MAX:
            raise PromoteError("the token epochs are used up (2^24 promotions): refusing")
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
        _write_epoch(conn, new_epoch, f"orbit-admin promote: was a replica of {source}")
        _keep_epoch(epoch_file, new_epoch, target)
        say(
            f"token epoch {target_epoch} -> {new_epoch}: tokens from now on start at "
            f"{new_epoch << 40}"
        )
        semi = _one(conn, "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync_slave_enabled'")
        with conn.cursor() as cur:
            if semi and semi["Value"] == "ON":
                # A replica set up for semi-sync waits, as the primary, for its replicas' ack.
                cur.execute("SET GLOBAL rpl_semi_sync_slave_enabled = OFF")
                cur.execute("SET GLOBAL rpl_semi_sync_master_enabled = ON")
                say("semi-synchronous replication: on, as the primary")
            cur.execute("SET GLOBAL read_only = 0")
        say(f"{_where(target)} is the primary: read_only = 0")
        for dsn, other in others:
            _repoint(other, target, repl_user, repl_password)
            say(f"replica {_where(dsn)} now replicates from {_where(target)}")
        return new_epoch
    finally:
        for _, other in others:
            other.close()
        conn.close()


def raise_epoch(
    target: str, epoch_file: Path | None = None, say: Callable[[str], None] = print
) -> int:
    """Raise the token epoch of a server that is no replica, and return the new epoch.

    A restore from a backup sends every key's token back to its value at backup time; the
    next holder would get a token the resource has already seen. Run this on the restored
    server before it takes traffic: the epoch goes above the restored one and above the last
    one written to ``--epoch-file``, so every token granted from then on exceeds every token
    granted before the restore (H1, K7).
    """
    _check_dsns(target)
    written_epoch = read_epoch_file(epoch_file)
    conn = _admin(target)
    try:
        if _one(conn, "SHOW SLAVE STATUS") is not None:
            raise PromoteError(f"{_where(target)} is a replica: promote it instead")
        current = _orbit_epoch(conn, target)
        new_epoch = max(current, written_epoch or 0) + 1
        if new_epoch > EPOCH_MAX:
            raise PromoteError("the token epochs are used up (2^24 raises): refusing")
        _write_epoch(conn, new_epoch, "orbit-admin raise-epoch")
        _keep_epoch(epoch_file, new_epoch, target)
        say(f"token epoch {current} -> {new_epoch}: tokens from now on start at {new_epoch << 40}")
        return new_epoch
    finally:
        conn.close()


def _orbit_epoch(conn, target: str) -> int:
    """The token epoch of the Orbit database on ``conn``; refused when there is none."""
    try:
        _one(conn, "SELECT 1 FROM orbit_meta LIMIT 1")
        return _epoch(conn)
    except pymysql.MySQLError as exc:
        raise PromoteError(
            f"{_where(target)} holds no Orbit database ({exc.args[1]}): refusing"
        ) from exc


def _write_epoch(conn, epoch: int, note: str) -> None:
    # A statement, not a routine: Orbit's routines run as their definer, the application's
    # account, which read_only refuses until the epoch is raised.
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE token_epoch SET epoch = %s, advanced_at = UTC_TIMESTAMP(6), note = %s "
            "WHERE id = 1",
            (epoch, note),
        )


def _keep_epoch(epoch_file: Path | None, epoch: int, target: str) -> None:
    if epoch_file is not None:
        epoch_file.write_text(json.dumps({"epoch": epoch, "primary": _where(target)}))


def _caught_up(conn, position: str, seconds: int) -> bool:
    """Whether the replica on ``conn`` applies up to GTID ``position`` within ``seconds``."""
    return _one(conn, "SELECT MASTER_GTID_WAIT(%s, %s) AS r", (position, seconds))["r"] == 0


def _repoint(conn, target: str, user: str, password: str) -> None:
    settings = db.parse_dsn(target)
    with conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos",
            (settings["host"], settings["port"], user, password),
        )
        cur.execute("START SLAVE")
