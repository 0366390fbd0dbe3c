"""Helpers every part measures with: percentiles, the server's lock counters and settings,
handler reads per call, parked backlogs inserted in bulk, threads run together."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from orbit_shell.engine import db
from orbit_shell.engine.db import Database
from orbit_shell.engine.schema import routine_name


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def history_length(conn) -> int:
    """InnoDB's history list length: undo logs purge has not processed yet."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT `count` AS n FROM information_schema.INNODB_METRICS "
            "WHERE name = 'trx_rseg_history_len'"
        )
        row = cur.fetchone()
    return int(row["n"]) if row else -1


def server_settings(d: Database) -> dict[str, str]:
    """What makes a commit cost what it costs, recorded with the figures."""
    [row] = d.query(
        "SELECT @@version AS version, @@log_bin AS log_bin, @@sync_binlog AS sync_binlog, "
        "@@binlog_format AS binlog_format, "
        "@@innodb_flush_log_at_trx_commit AS innodb_flush_log_at_trx_commit"
    )
    return {k: str(v) for k, v in row.items()}


def lock_counters(d: Database) -> dict[str, int]:
    """The server's deadlocks and row-lock waits so far (global InnoDB counters)."""
    rows = d.query(
        "SHOW GLOBAL STATUS WHERE Variable_name IN "
        "('Innodb_deadlocks', 'Innodb_row_lock_waits', 'Innodb_row_lock_time')"
    )
    return {r["Variable_name"].lower(): int(r["Value"]) for r in rows}


def lock_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Deadlocks, row-lock waits and the milliseconds waited between two readings."""
    return {
        "deadlocks": after["innodb_deadlocks"] - before["innodb_deadlocks"],
        "row_lock_waits": after["innodb_row_lock_waits"] - before["innodb_row_lock_waits"],
        "row_lock_wait_ms": after["innodb_row_lock_time"] - before["innodb_row_lock_time"],
    }


def deadlock_reports(log: Path, offset: int) -> list[str]:
    """The deadlocks InnoDB wrote to the server's error log after ``offset`` (a server run with
    ``innodb_print_all_deadlocks``): each from its detection to the transaction rolled back.
    The counters say how many; a report says which statements, rows and locks met."""
    if not log.exists():
        return []
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    reports, current = [], None
    for line in text.splitlines():
        if "Transactions deadlock detected" in line:
            current = [line]
        elif current is not None:
            current.append(line)
            if "WE ROLL BACK TRANSACTION" in line:
                reports.append("\n".join(current))
                current = None
    return reports


def locks_text(part: dict) -> str:
    return f"deadlocks {part['deadlocks']}, row-lock waits {part['row_lock_waits']}"


def handler_reads(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(r["Value"]) for r in cur.fetchall())


def counted_call(conn, procedure: str, *args) -> tuple[float, int, list[dict]]:
    """CALL ``procedure`` on ``conn`` (a connection of its own, for its handler counters):
    its milliseconds, the rows it read and its first result set."""
    before = handler_reads(conn)
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(f"CALL {routine_name(procedure)}({', '.join(['%s'] * len(args))})", args)
        rows = list(cur.fetchall())
        while cur.nextset():
            pass
    ms = (time.perf_counter() - started) * 1000
    return ms, handler_reads(conn) - before, rows


def park(dsn: str, ns: int, app: int, queue: int, key: str, count: int) -> None:
    """Bench fixture: insert `count` tasks parked behind `key` in bulk (the state task_submit
    leaves them in), because submitting a million through the procedure would dominate the run.
    Priority 9 (the last): once the key is released, a promoted one never displaces the tasks
    whose claims the next sizes time."""
    conn = db.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE digits (d INT) ENGINE=MEMORY")
        cur.execute("INSERT INTO digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)")
        # A temporary table cannot be opened twice in one statement: three copies of 0-9.
        for copy in ("digits2", "digits3"):
            cur.execute(f"CREATE TEMPORARY TABLE {copy} LIKE digits")
            cur.execute(f"INSERT INTO {copy} SELECT * FROM digits")
        cur.execute("CREATE TEMPORARY TABLE seq (n INT PRIMARY KEY) ENGINE=MEMORY")
        cur.execute(
            "INSERT INTO seq SELECT a.d + 10 * b.d + 100 * c.d FROM digits a, digits2 b, digits3 c"
        )
        done = 0
        while done < count:
            batch = min(1000, count - done)
            cur.execute(
                "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                "idempotency_key, handler, handler_version, payload_version, payload, "
                "concurrency_key, priority, state, lane, max_attempts, available_at, created_at, "
                "updated_at) SELECT LOWER(REPLACE(UUID(), '-', '')), %s, %s, %s, "
                "CONCAT(%s, '-p-', %s + n), 'noop', 'v1', 'v1', '{}', %s, 9, 'WAITING', "
                "'BLOCKED', 3, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) "
                "FROM seq WHERE n < %s",
                (ns, app, queue, key, done, key, batch),
            )
            done += batch
    conn.close()


def wait_turn(started: float, k: int, i: int, producers: int, rate: float, size: int = 1) -> None:
    """Producer ``i`` of ``producers``, about to send its ``k``-th request of ``size`` tasks,
    waits for its turn at ``rate`` tasks/s in all from ``started`` (monotonic), the requests of
    all producers interleaved. Every paced run paces so, Orbit's and its peers' alike: their
    submit-to-start figures compare only under the same arrivals."""
    time.sleep(max(0.0, started + (k * producers + i) * size / rate - time.monotonic()))


def run_threads(fn, n: int) -> None:
    threads = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def mariadbd_pids() -> list[int]:
    """The local mariadbd processes (the bench's private server, or the one a DSN names)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and b"mariadbd" in (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def db_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` have used, every thread of each, live or ended; a
    process that is gone counts nothing. Read from each process's scheduler clock, which
    counts nanoseconds: /proc's utime and stime advance in 10 ms ticks, as coarse as 500
    calls of the cheapest steps take together."""
    total = 0
    for pid in pids:
        try:
            # The clock clock_getcpuclockid(3) names: the process's CPU time, all threads.
            total += time.clock_gettime_ns(((~pid) << 3) | 2)
        except OSError:
            continue
    return total / 1e9


def key_turn_costs(turn, turns: int, keys: int) -> dict:
    """Wall time and mariadbd CPU of ``turns`` calls of ``turn()`` (one hot-key turn: report,
    claim and start in one call; it returns how many tasks it claimed), after five that warm the
    caches and are not counted. Every turn must claim ``keys`` tasks, one per key."""
    wall = cpu = 0.0
    pids = mariadbd_pids()
    for n in range(turns + 5):
        c0, t0 = db_cpu_seconds(pids), time.perf_counter()
        claimed = turn()
        if n >= 5:
            wall += time.perf_counter() - t0
            cpu += db_cpu_seconds(pids) - c0
        if claimed != keys:
            raise RuntimeError(f"a turn claimed {claimed} of {keys} keys' next tasks")
    return {
        "keys": keys,
        "wall_ms_per_turn": 1000 * wall / turns,
        "db_cpu_ms_per_turn": 1000 * cpu / turns,
        "db_cpu_ms_per_task": 1000 * cpu / (turns * keys),
    }


def cpu_sample() -> tuple[float, float, float]:
    """(busy, total) CPU seconds of the machine from /proc/stat, and CPU seconds used so far by
    mariadbd processes: the e2e part reports how busy the two cores were, and how much of it
    was the database, so a lock-bound run is told apart from a CPU-bound one."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / tick, sum(fields) / tick, db_cpu_seconds(mariadbd_pids())


# A process's role in a run by the program it runs (the name of its first or second argument):
# the SDK's and the floors' worker processes, the `orbit` and floor servers (gunicorn, every
# process of it), the database.
ROLES = {
    "noop_worker.py": "workers",
    "spec_floor_e2e.py": "workers",
    "orbit": "server",
    "http_floor.py": "server",
    "mariadbd": "mariadbd",
}


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far, by pid, of this process (role "producers": the bench's own
    threads send the tasks) and of every process that plays a role in ``ROLES`` (the others,
    Redis and Celery's workers among them, are not read)."""
    me = os.getpid()
    out = {me: ("producers", time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID))}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        role = next((ROLES[n] for n in (Path(a).name for a in argv[:2]) if n in ROLES), None)
        if role:
            out[int(entry.name)] = (role, db_cpu_seconds([int(entry.name)]))
    return out


def cpu_split(before: dict, after: dict, tasks: int) -> dict[str, float]:
    """CPU milliseconds a task by role between two ``cpu_by_process`` samples, of the
    processes alive at both: where one task's CPU went."""
    split: dict[str, float] = {}
    for pid, (role, seconds) in after.items():
        if pid in before and before[pid][0] == role:
            split[role] = split.get(role, 0.0) + 1000 * (seconds - before[pid][1]) / tasks
    return split


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
