"""A claim of one unkeyed task writes attempt_grant's effects itself (worker_claim_grant's
single grant, the claim of every worker below its ceiling): it must leave exactly what
attempt_grant leaves. The same claims are made in two namespaces, one whose queue has a permit
limit far above what is reached, so that its claims take attempt_grant, and everything they
leave is compared: answers, tasks, attempts, permits, history and counters (the limited
queue's count of active attempts apart). Real procedures on a real MariaDB."""

from __future__ import annotations

import pytest

from tests.engine import Engine


def claims(database, tenant, start: int, limited: bool) -> dict:
    """Two tasks, the first with a deadline inside the lease (its lease is cut there), each
    taken by a claim of one; what the claims answered and left."""
    eng = Engine(database, tenant)
    queue, _ = eng.queue_create(lease=30, max_concurrency=1000 if limited else None)
    session, _ = eng.hello([queue], capacity=4, keys=True)
    tasks = [eng.submit(queue=queue, deadline=10, priority=1), eng.submit(queue=queue)]
    answers = []
    for _ in tasks:
        [[grant]] = database.call("worker_claim", tenant.namespace_id, session, 1, start)
        # Ids and instants differ between the namespaces; the rows below compare the instants.
        answers.append(
            {k: v for k, v in grant.items() if not k.endswith("_id") and not k.endswith("_at")}
            | {"task": tasks.index(grant["task_id"]), "keys": sorted(grant)}
        )
    rows = {}
    for n, public in enumerate(tasks):
        [task] = database.query(
            "SELECT t.state, t.lane, t.attempts_used, t.current_attempt_id = a.id AS current, "
            "t.updated_at = a.created_at AS stamped, a.attempt_number, a.state AS attempt_state, "
            "a.concurrency_token, a.concurrency_slot, a.session_id = s.id AS by_session, "
            "a.lease_expires_at = LEAST(a.created_at + INTERVAL 30 SECOND, "
            "COALESCE(t.deadline_at, a.created_at + INTERVAL 30 SECOND)) AS lease, "
            "t.deadline_at < a.created_at + INTERVAL 30 SECOND AS cut, "
            "a.started_at = a.created_at AS started_at_grant, a.started_at IS NULL AS unstarted "
            "FROM tasks t JOIN attempts a ON a.task_id = t.id "
            "JOIN worker_sessions s ON s.public_id = %s WHERE t.public_id = %s",
            (session, public),
        )
        task["permits"] = database.query(
            "SELECT p.kind, p.scope_id = t.queue_id AS on_queue, p.exclusive_resource_id, "
            "p.expires_at = a.lease_expires_at AS with_lease, p.created_at = a.created_at AS at "
            "FROM permits p JOIN attempts a ON a.id = p.attempt_id "
            "JOIN tasks t ON t.id = a.task_id WHERE t.public_id = %s ORDER BY p.kind",
            (public,),
        )
        task["history"] = database.query(
            "SELECT h.event, h.from_state, h.to_state, h.actor = CONCAT('session:', %s) AS actor, "
            "h.attempt_id = t.current_attempt_id AS of_attempt, h.concurrency_token, h.details, "
            # Each row bears the instant of what it records: the submission's the task's
            # creation, the grant's (and a start with it) the attempt's.
            "h.created_at = IF(h.event = 'SUBMITTED', t.created_at, a.created_at) AS stamped "
            "FROM task_history h JOIN tasks t ON t.id = h.task_id "
            "JOIN attempts a ON a.id = t.current_attempt_id WHERE t.public_id = %s "
            "ORDER BY h.id",
            (session, public),
        )
        rows[n] = task
    [counters] = database.query(
        "SELECT s.in_flight, a.active_attempts AS app_active, q.unfinished_tasks "
        "FROM worker_sessions s JOIN applications a ON a.id = s.application_id "
        "JOIN queues q ON q.public_id = %s WHERE s.public_id = %s",
        (queue, session),
    )
    return {"answers": answers, "rows": rows, "counters": counters}


@pytest.mark.parametrize("start", [0, 1], ids=["leased", "started"])
def test_w3_a_claim_of_one_leaves_what_attempt_grant_leaves(database, tenant_factory, start):
    inline = claims(database, tenant_factory(), start, limited=False)
    granted = claims(database, tenant_factory(), start, limited=True)
    # The claims reached what they are about: each took one task, the deadline's first.
    assert [a["task"] for a in inline["answers"]] == [0, 1]
    assert [inline["rows"][n]["cut"] for n in (0, 1)] == [1, None]  # a lease cut at its deadline
    assert [h["event"] for h in inline["rows"][1]["history"]] == (
        ["SUBMITTED", "CLAIMED", "STARTED"] if start else ["SUBMITTED", "CLAIMED"]
    )
    assert all(h["stamped"] for h in inline["rows"][1]["history"])
    for part in inline:
        assert inline[part] == granted[part], part
