"""Per-procedure lock cases shared by the lock-wait and deadlock tests: for each public
procedure, the row it locks first, the row it locks second, and the arguments of a call that
succeeds on the state `setup` prepares."""

from __future__ import annotations

import secrets

PROCEDURES = [
    "task_submit",
    "worker_claim",
    "worker_hello",
    "attempt_result",
    "task_cancel",
    "task_resolve",
    "queue_set_state",
    "attempt_start",
    "attempt_renew",
]


def setup(eng, database):
    """Everything the cases need: a session with a RUNNING, a LEASED and a NEEDS_REVIEW attempt,
    a WAITING task, and a known worker identity."""
    worker = "dl-" + secrets.token_hex(4)
    session, _ = eng.hello(capacity=8, worker=worker)
    running, leased, review = eng.submit("dl/a"), eng.submit("dl/b"), eng.submit("dl/c")
    waiting = eng.submit("dl/a")
    got = {a["task_id"]: a["attempt_id"] for a in eng.claim(session, 8)}
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
    return {
        "session": session,
        "worker": worker,
        "running": got[running],
        "leased": got[leased],
        "review": review,
        "waiting": waiting,
        "app": eng.t.application_id,
        "queue": eng.ids[eng.queue],
        **s_extra,
    }


# procedure -> (first lock, second lock, args); locks are (table, id getter)
APP = ("SELECT id FROM applications WHERE id = %s FOR UPDATE", "app")
QUEUE = ("SELECT id FROM queues WHERE id = %s FOR UPDATE", "queue")


def cases(eng, s):
    ns = eng.t.namespace_id
    attempt = lambda key: ("SELECT id FROM attempts WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    task = lambda key: ("SELECT id FROM tasks WHERE public_id = %s FOR UPDATE", key)  # noqa: E731
    return {
        "task_submit": (
            APP,
            QUEUE,
            (
                ns,
                s["queue"],
                "dl-" + secrets.token_hex(4),
                "0" * 64,
                "h",
                "v1",
                "v1",
                "{}",
                "",
                "dl/new",
                5,
                None,
                None,
                "t",
                None,
                None,
                None,
            ),
        ),
        "worker_claim": (APP, QUEUE, (ns, s["session"], 1)),
        "worker_hello": (
            APP,
            ("SELECT id FROM worker_sessions WHERE worker_id = %s FOR UPDATE", "worker"),
            (ns, eng.t.application_id, s["worker"], 8, 1, f'["{eng.queue}"]', "0" * 64),
        ),
        "attempt_result": (
            APP,
            attempt("running"),
            (ns, s["session"], s["running"], "succeeded", 0, None, None),
        ),
        "task_cancel": (APP, task("waiting"), (ns, s["waiting"], "t")),
        "task_resolve": (APP, task("review"), (ns, s["review"], "FAILED", "t", None)),
        "queue_set_state": (APP, QUEUE, (ns, eng.queue, "PAUSED")),
        "attempt_start": (
            attempt("leased"),
            # Only the tasks row: a join FOR UPDATE would lock the attempt as well.
            ("SELECT id FROM tasks WHERE id = %s FOR UPDATE", "leased_task"),
            (ns, s["session"], s["leased"]),
        ),
        "attempt_renew": (
            attempt("running"),
            ("SELECT id FROM permits WHERE attempt_id = %s FOR UPDATE", "running_attempt"),
            (ns, s["session"], s["running"]),
        ),
    }
