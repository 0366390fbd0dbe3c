"""The indexes part: what each secondary index of ``tasks`` costs on disk, and what removing it
would cost the query that needs it.

The table is given a mixed shape: another tenant's 20,000 finished tasks, then the bench
namespace's 100,000 finished ones (each its own key, with the attempt, history and
Idempotency-Key record a finished task leaves; one in 20 of a second queue, one in 100 with a
business key) and 3,000 waiting ones (1,000 parked behind one key, 1,000 READY each on its
own key, 500 READY unkeyed, 250 in backoff due in an hour, 250 of the second queue due
already, half of the waiting ones with a deadline). Then for each index:

- bytes per task: its pages after ``ANALYZE`` (``mysql.innodb_index_stats``), times the page
  size, over the table's rows;
- its query, as the routine or read that needs it asks it (without the locking clause),
  EXPLAINed and run twice: naming the index (``FORCE INDEX``), and with it ignored (``IGNORE
  INDEX``, what the optimizer would do if it were dropped): the plan's index and the rows
  the handler read (``Handler_read_*``), each way.
"""

from __future__ import annotations

from cleanup import make_backlog
from engine_parts import Bench
from measures import handler_reads, park

from orbit_shell.engine import db

FINISHED, OTHER_TENANT = 100_000, 20_000
FINAL = "('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEADLINE_EXCEEDED')"
# index -> (who needs it, the query; {ns}, {queue}, {hint} filled in, %s the arguments' slots)
QUERIES: dict[str, tuple[str, str, tuple]] = {
    "uq_tasks_public_id": (
        "every read and action by public id",
        "SELECT id FROM tasks {hint} WHERE public_id = %s",
        ("public_id",),
    ),
    "ix_tasks_claim": (
        "the claim's candidates",
        "SELECT id FROM tasks {hint} WHERE queue_id = {queue} AND lane = 'READY' "
        "ORDER BY priority, id LIMIT 10",
        (),
    ),
    "ix_tasks_queue_lane_key": (
        "a claim of a session without keys",
        "SELECT id FROM tasks {hint} WHERE queue_id = {queue} AND lane = 'READY' "
        "AND concurrency_key = '' ORDER BY priority, id LIMIT 10",
        (),
    ),
    "ix_tasks_key_lane": (
        "a release promotes the key's next parked task",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND concurrency_key = 'hot' "
        "AND lane = 'BLOCKED' ORDER BY priority, id LIMIT 1",
        (),
    ),
    "ix_tasks_due": (
        "the sweeper's due backoff",
        "SELECT id FROM tasks {hint} WHERE lane = 'DELAYED' AND available_at <= UTC_TIMESTAMP(6) "
        "ORDER BY available_at, id LIMIT 1",
        (),
    ),
    "ix_tasks_deadline": (
        "the sweeper's deadlines",
        "SELECT id FROM tasks {hint} WHERE lane = 'BLOCKED' AND deadline_at <= UTC_TIMESTAMP(6) "
        "ORDER BY deadline_at, id LIMIT 1",
        (),
    ),
    "ix_tasks_queue_due": (
        "a claim's recovery of its queues' due backoff",
        "SELECT id FROM tasks {hint} WHERE queue_id = {queue} AND lane = 'DELAYED' "
        "AND available_at <= UTC_TIMESTAMP(6) LIMIT 1",
        (),
    ),
    "ix_tasks_ns": (
        "GET /v1/tasks without a filter",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND id > 0 ORDER BY id LIMIT 50",
        (),
    ),
    "ix_tasks_ns_state": (
        "GET /v1/tasks?state=, NEEDS_REVIEW counts",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND state = 'WAITING' "
        "ORDER BY id LIMIT 50",
        (),
    ),
    "ix_tasks_ns_business": (
        "GET /v1/tasks?business_key=",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND business_key = %s "
        "ORDER BY id LIMIT 50",
        ("business_key",),
    ),
    "ix_tasks_ns_queue": (
        "GET /v1/tasks?queue_id=",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND queue_id = {other} "
        "ORDER BY id LIMIT 50",
        (),
    ),
    "ix_tasks_ns_key": (
        "GET /v1/tasks?concurrency_key=, a key's tokens, keys_reclaim's check",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND concurrency_key = 'hot' "
        "ORDER BY id LIMIT 50",
        (),
    ),
    "ix_tasks_ns_finished": (
        "the cleanup's batch (all finished within the window: nothing to delete)",
        "SELECT id FROM tasks {hint} WHERE namespace_id = {ns} AND state IN " + FINAL + " "
        "AND finished_at < UTC_TIMESTAMP(6) - INTERVAL 1 DAY LIMIT 500",
        (),
    ),
}


def _dataset(bench: Bench) -> dict:
    # Another tenant's finished tasks first, so that they sit below the bench namespace's in
    # the clustered index; another queue of the bench namespace, for the queue filter and for
    # due backoff that is not the bench queue's.
    make_backlog(Bench(bench.dsn), OTHER_TENANT)
    make_backlog(bench, FINISHED)
    [[made]] = bench.db.call(
        "queue_create", bench.ns, bench.app, "other", None, None, 3, 30, 1, 300
    )
    other = bench.db.query("SELECT id FROM queues WHERE public_id = %s", (made["queue_id"],))
    other = other[0]["id"]
    park(bench.dsn, bench.ns, bench.app, bench.queue, "hot", 3_000)
    conn = db.connect(bench.dsn)
    try:
        with conn.cursor() as cur:
            ns, parked = (
                bench.ns,
                "namespace_id = %s AND concurrency_key = 'hot' AND lane = 'BLOCKED'",
            )
            for sql, args in (
                (
                    "UPDATE tasks SET queue_id = %s WHERE namespace_id = %s AND lane IS NULL "
                    "AND id %% 20 = 0",
                    (other, ns),
                ),
                (
                    "UPDATE tasks SET business_key = CONCAT('order-', id) WHERE namespace_id = %s "
                    "AND lane IS NULL AND id %% 100 = 0",
                    (ns,),
                ),
                (
                    "UPDATE tasks SET lane = 'READY', concurrency_key = CONCAT('k/', id) "
                    f"WHERE {parked} ORDER BY id LIMIT 1000",
                    (ns,),
                ),
                (
                    f"UPDATE tasks SET lane = 'READY', concurrency_key = '' WHERE {parked} "
                    "ORDER BY id LIMIT 500",
                    (ns,),
                ),
                (
                    "UPDATE tasks SET lane = 'DELAYED', concurrency_key = '', available_at = "
                    f"UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE {parked} ORDER BY id LIMIT 250",
                    (ns,),
                ),
                (
                    "UPDATE tasks SET lane = 'DELAYED', concurrency_key = '', queue_id = %s, "
                    f"available_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE WHERE {parked} "
                    "ORDER BY id LIMIT 250",
                    (other, ns),
                ),
                (
                    "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR "
                    "WHERE namespace_id = %s AND state = 'WAITING' AND id %% 2 = 0",
                    (ns,),
                ),
            ):
                cur.execute(sql, args)
            cur.execute(
                "SELECT public_id, business_key FROM tasks WHERE namespace_id = %s "
                "AND business_key LIKE 'order-%%' LIMIT 1",
                (ns,),
            )
            sample = cur.fetchone()
            cur.execute("ANALYZE TABLE tasks")
            cur.fetchall()
            cur.execute("SELECT COUNT(*) AS n FROM tasks")
            rows = cur.fetchone()["n"]
            cur.execute(
                "SELECT index_name, stat_value * @@innodb_page_size AS b "
                "FROM mysql.innodb_index_stats WHERE database_name = DATABASE() "
                "AND table_name = 'tasks' AND stat_name = 'size'"
            )
            sizes = {r["index_name"]: int(r["b"]) for r in cur.fetchall()}
    finally:
        conn.close()
    return {"other": other, "rows": rows, "sizes": sizes, **sample}


def _measure(conn, sql: str, args: tuple) -> dict:
    with conn.cursor() as cur:
        cur.execute("EXPLAIN " + sql, args)
        plan = cur.fetchone()
        before = handler_reads(conn)
        cur.execute(sql, args)
        cur.fetchall()
    return {"key": plan["key"], "type": plan["type"], "rows_read": handler_reads(conn) - before}


def run_indexes(bench: Bench) -> dict:
    data = _dataset(bench)
    conn = db.connect(bench.dsn)
    out: dict = {"tasks_rows": data["rows"], "primary_bytes_per_task": 0.0, "indexes": {}}
    out["primary_bytes_per_task"] = data["sizes"].get("PRIMARY", 0) / data["rows"]
    try:
        for index, (need, template, slots) in QUERIES.items():
            args = tuple(data[s] for s in slots)
            sql = {
                way: template.format(
                    hint=f"{way} INDEX ({index})",
                    ns=bench.ns,
                    queue=bench.queue,
                    other=data["other"],
                )
                for way in ("FORCE", "IGNORE")
            }
            out["indexes"][index] = {
                "needed_by": need,
                "bytes_per_task": data["sizes"].get(index, 0) / data["rows"],
                "with": _measure(conn, sql["FORCE"], args),
                "without": _measure(conn, sql["IGNORE"], args),
            }
    finally:
        conn.close()
    print(
        f"indexes: {data['rows']:,} tasks ({OTHER_TENANT:,} of another tenant, {FINISHED:,} "
        f"finished and 3,000 waiting in the bench namespace); the clustered "
        f"rows {out['primary_bytes_per_task']:.0f} bytes per task",
        flush=True,
    )
    for index, m in out["indexes"].items():
        w, wo = m["with"], m["without"]
        print(
            f"indexes: {index:<24} {m['bytes_per_task']:>4.0f} bytes/task  rows read "
            f"{w['rows_read']:>6} with it, {wo['rows_read']:>6} without "
            f"({wo['key'] or 'no index'}, {wo['type']}): {m['needed_by']}",
            flush=True,
        )
    return out
