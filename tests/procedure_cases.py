"""Per-procedure lock cases shared by the lock-wait and deadlock tests: for each public
procedure, the row it locks first, the row it locks second, and the arguments of a call that
succeeds on the state `setup` prepares."""

from __future__ import annotations

import json
import secrets

from tests.engine import submit_item, succeeded_items

# Procedures that take two or more locks: a deadlock can be forced into each of them.
PROCEDURES = [
    "task_submit",
    "task_submit_many",
    "worker_claim",
    "worker_hello",
    "attempt_result",
    "task_cancel",
    "task_resolve",
    "queue_set_state",
    "attempt_start",
    "attempt_start_many",
    "attempt_result_many",
    "worker_report_claim",
    "attempt_renew",
    "schedule_add_version",
    "schedule_set_state",
    "schedule_advance",
]
# Procedures that take one lock (they can wait on it, but never hold one while waiting, so no
# deadlock can involve them): lock waits only. worker_namespace and credential_create take no
# lock on an existing row at all.
SINGLE_LOCK = [
    "queue_create",
    "schedule_create",
    "worker_goodbye",
    "tenant_bootstrap",
    "application_set_quota",
    "lease_sweep",
    "credential_revoke",
]


# Cases run with an application quota set (so that the application row is locked second).
QUOTA_CASES = {"worker_claim"}


def setup(eng, database):
    """Everything the cases need: a session with a RUNNING, a LEASED and a NEEDS_REVIEW attempt,
    a WAITING task, and a known worker identity."""
    worker = "dl-" + secrets.token_hex(4)
    session, _ = eng.hello(capacity=8, worker=worker)
    running, leased, review = eng.submit("dl/a"), eng.submit("dl/b"), eng.submit("dl/c")
    waiting = eng.submit("dl/a")
    got = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 8)}
    eng.submit("dl/r")  # READY, its key free: a claim's candidate
    eng.start(session, got[running])
    eng.start(session, got[review])
    eng.result(session, got[review], "unknown")
    ids = {
        r["public_id"]: (r["id"], r["task_id"])
        for r in database.query(
            "SELECT public_id, id, task_id FROM attempts WHERE public_id IN (%s, %s)",
            (got[running], got[leased]),
        )
    }
    s_extra = {"running_attempt": ids[got[running]][0], "leased_task": ids[got[leased]][1]}
    definition = json.dumps(
        {
            "task": {
                "queue_id": eng.queue,
                "handler": "h",
                "handler_version": "v1",
                "payload_version": "v1",
                "payload": {},
                "business_key": "",
                "concurrency_key": "dl/s",
                "priority": 5,
                "max_attempts": None,
                "deadline_seconds": None,
            }
        }
    )
    [[made]] = database.call(
        "schedule_create",
        eng.t.namespace_id,
        eng.t.application_id,
        "dl-" + secrets.token_hex(4),
        "INTERVAL",
        None,
        None,
        60,
        definition,
        "2030-01-01 00:00:00",
    )
    [sched] = database.query(
        "SELECT id, public_id, next_fire_at FROM schedules WHERE public_id = %s",
        (made["schedule_id"],),
    )
    s_extra.update(
        schedule=sched["public_id"],
        schedule_row=sched["id"],
        schedule_next=sched["next_fire_at"],
        definition=definition,
    )
    return {
        "idem": "dl-" + secrets.token_hex(4),
        "ns": eng.t.namespace_id,
        "session_row": database.query(
            "SELECT id FROM worker_sessions WHERE public_id = %s", (session,)
        )[0]["id"],
        "session": session,
        "worker": worker,
        "running": got[running],
        "running_task": running,
        "leased": got[leased],
        "review": review,
        "waiting": waiting,
        "app": eng.t.application_id,
        "queue": eng.ids[eng.queue],
        "credential": eng.t.token.split("_")[1],
        **s_extra,
    }


# procedure -> (first lock, second lock, args); locks are (SQL with one %s, key of setup's dict).
# Without quotas no procedure locks the applications or queues rows: a writer's first lock is
# its namespace gate, taken with SKIP LOCKED (never waited for), so the cases lock what comes
# after it (sql/README.md, "Lock order").
APP = ("SELECT id FROM applications WHERE id = %s FOR UPDATE", "app")
QUEUE = ("SELECT id FROM queues WHERE id = %s FOR UPDATE", "queue")
GATES = ("SELECT COUNT(*) FROM namespace_gates WHERE namespace_id = %s FOR UPDATE", "ns")
SCHEDULE = ("SELECT id FROM schedules WHERE id = %s FOR UPDATE", "schedule_row")
SESSION = ("SELECT id FROM worker_sessions WHERE id = %s FOR UPDATE", "session_row")


def key_row(key: str) -> tuple[str, str]:
    return (
        "SELECT id FROM concurrency_resources WHERE concurrency_key = '"
        + key
        + "' AND namespace_id = %s FOR UPDATE",
        "ns",
    )


def idempotency_record(ns: int, idem: str) -> tuple[str, str]:
    """An uncommitted insert of the record a submission inserts last: it waits on it."""
    return (
        "INSERT INTO idempotency_records (namespace_id, idempotency_key, fingerprint, task_id,"
        f" created_at) VALUES ({ns}, %s, REPEAT('0', 64), 0, UTC_TIMESTAMP(6))",
        "idem",
    )


def cases(eng, s):
    ns = eng.t.namespace_id
    attempt = lambda key: ("SELECT id FROM attempts WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    task = lambda key: ("SELECT id FROM tasks WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    succeeded_running = succeeded_items([s["running"]])
    return {
        "task_submit": (
            key_row("dl/a"),
            idempotency_record(ns, s["idem"]),
            (
                ns,
                s["queue"],
                s["idem"],
                "0" * 64,
                "h",
                "v1",
                "v1",
                "{}",
                "",
                "dl/a",
                5,
                None,
                None,
                "wait",
                None,
                None,
                "t",
                None,
                None,
                None,
            ),
        ),
        # Two keys: the batch locks every key row it names at once, in key order, before its
        # group table is written (a transaction that changed a MEMORY table is never the
        # victim, so the cycle must close before).
        "task_submit_many": (
            key_row("dl/a"),
            key_row("dl/b"),
            (
                ns,
                "t",
                json.dumps(
                    [
                        submit_item(
                            s["queue"],
                            key,
                            idempotency_key=f"{s['idem']}-{key}",
                            max_attempts=None,
                            deadline_seconds=None,
                        )
                        for key in ("dl/b", "dl/a")
                    ]
                ),
            ),
        ),
        # Under a quota (QUOTA_CASES): without one the claim holds its session row alone
        # before it writes its candidates' MEMORY table, and a cycle through its key rows rolls
        # back the other transaction (sql/README.md, "Set-based paths").
        # Both claims start what they grant (start 1): the longer path, with the STARTED
        # history rows.
        "worker_claim": (APP, SESSION, (ns, s["session"], 1, 1)),
        "worker_hello": (
            APP,
            ("SELECT id FROM worker_sessions WHERE worker_id = %s FOR UPDATE", "worker"),
            (ns, eng.t.application_id, s["worker"], 8, 1, f'["{eng.queue}"]', "0" * 64, None),
        ),
        "attempt_result": (
            attempt("running"),
            SESSION,
            (ns, s["session"], s["running"], "succeeded", 0, None, None),
        ),
        # A parked task: its key row first, then the task (task_lock_waiting).
        "task_cancel": (key_row("dl/a"), task("waiting"), (ns, s["waiting"], "t")),
        "task_resolve": (task("review"), key_row("dl/c"), (ns, s["review"], "WAITING", "t", None)),
        "queue_set_state": (GATES, QUEUE, (ns, eng.queue, "PAUSED")),
        "attempt_start": (
            attempt("leased"),
            # Only the tasks row: a join FOR UPDATE would lock the attempt as well.
            ("SELECT id FROM tasks WHERE id = %s FOR UPDATE", "leased_task"),
            (ns, s["session"], s["leased"]),
        ),
        "attempt_start_many": (
            attempt("leased"),
            ("SELECT id FROM tasks WHERE id = %s FOR UPDATE", "leased_task"),
            (ns, s["session"], json.dumps([s["leased"]]), 0),
        ),
        "attempt_result_many": (
            attempt("running"),
            SESSION,
            (
                ns,
                s["session"],
                succeeded_running,
            ),
        ),
        "worker_report_claim": (
            attempt("running"),
            SESSION,
            (
                ns,
                s["session"],
                succeeded_running,
                1,
                1,
            ),
        ),
        "schedule_add_version": (
            APP,
            SCHEDULE,
            (ns, s["schedule"], "INTERVAL", None, None, 30, s["definition"], "2030-01-01 00:00:00"),
        ),
        "schedule_set_state": (APP, SCHEDULE, (ns, s["schedule"], "PAUSED", None)),
        "schedule_advance": (
            APP,
            SCHEDULE,
            (
                s["schedule_row"],
                s["schedule_next"],
                s["schedule_next"],
                1,
                None,
                "2030-01-01 00:01:00",
            ),
        ),
        "queue_create": (
            APP,
            None,
            (ns, eng.t.application_id, "dl-" + secrets.token_hex(4), None, None, 3, 30, 1, 300),
        ),
        "schedule_create": (
            APP,
            None,
            (
                ns,
                eng.t.application_id,
                "dl-" + secrets.token_hex(4),
                "INTERVAL",
                None,
                None,
                60,
                s["definition"],
                "2030-01-01 00:00:00",
            ),
        ),
        "worker_goodbye": (
            ("SELECT id FROM worker_sessions WHERE worker_id = %s FOR UPDATE", "worker"),
            None,
            (ns, s["session"]),
        ),
        "tenant_bootstrap": (
            APP,
            None,
            (
                eng.t.application,
                "test",
                eng.t.namespace,
                "default",
                secrets.token_hex(8),
                "0" * 64,
                "tasks:read",
                "dl",
            ),
        ),
        "application_set_quota": (GATES, None, (eng.t.application, None, None)),
        "credential_revoke": (
            ("SELECT id FROM credentials WHERE public_id = %s FOR UPDATE", "credential"),
            None,
            (s["credential"],),
        ),
        # attempt_recover locks the attempt with its task: the task, so that the test may still
        # expire the attempt while the row is held.
        "lease_sweep": (task("running_task"), None, (100,)),
        "attempt_renew": (
            attempt("running"),
            ("SELECT attempt_id FROM permits WHERE attempt_id = %s FOR UPDATE", "running_attempt"),
            (ns, s["session"], s["running"]),
        ),
    }
