"""The batch routes leave the database exactly as the single routes do.

The batch procedures apply their common items set-based and the rest item by item; this drives
one scenario through the single routes in one namespace and through the batch routes in
another, and compares everything the two leave behind: answers, tasks, attempts, keys (tokens,
holders, candidates), permits, counters and history. The scenario mixes what takes the
set-based path (new unkeyed and keyed tasks, succeeded results) with what does not (a repeated
Idempotency-Key, a conflict, two tasks of one key, a started attempt started again, failed,
retried and unknown outcomes, a result repeated in the batch), then results without any text,
which take the set-based path's other form. A claim that starts what it grants (W3, the SDK
worker without prefetch) leaves what a claim and a start of each leave, compared the same way.
Real MariaDB through the Falcon app."""

from __future__ import annotations

import re

import pytest

from tests.engine import QUEUE_COUNTS
from tests.helpers import LONG_TEXT, Session, submit, task_body

SUBMISSIONS = [
    # A leading run of new tasks: the set-based path of task_submit_many.
    ("u2", {"priority": 2, "business_key": "order-7"}),
    ("k1", {"concurrency_key": "eq/one"}),
    ("k2", {"concurrency_key": "eq/two"}),
    ("u3", {"deadline_seconds": 3600, "max_attempts": 1}),
    # A key named three times in the run: r1 becomes its candidate, r2 and r3 park (K4).
    ("r1", {"concurrency_key": "eq/run"}),
    ("r2", {"concurrency_key": "eq/run", "priority": 1}),
    ("r3", {"concurrency_key": "eq/run"}),
    ("s0", {"concurrency_key": "eq/shared"}),
    # From here item by item: Idempotency-Key u1 is named twice.
    ("u1", {}),
    ("s1", {"concurrency_key": "eq/shared"}),  # parked behind s0, from the run
    ("s2", {"concurrency_key": "eq/shared"}),
    ("u1", {}),  # a replay of u1
    ("u1", {"payload": {"n": 2}}),  # a conflict
    ("u4", {"max_attempts": 2}),
    ("k3", {"concurrency_key": "eq/three", "payload": {"text": 'é "q" 😀'}}),
]
# By submission name: what the worker reports (in this order).
OUTCOMES = [
    ("u1", {"outcome": "succeeded", "result": {"ok": 1}}),
    ("k1", {"outcome": "succeeded", "error": {"note": "kept on the attempt only"}}),
    ("s0", {"outcome": "succeeded", "result": {"n": [1, None]}}),
    # A retry frees the key while r1 backs off: r2 (priority 1) is promoted before r3.
    ("r1", {"outcome": "failed", "retryable": True, "error": {"why": "later"}}),
    ("u2", {"outcome": "failed", "retryable": True, "error": {"why": "busy"}}),
    ("k2", {"outcome": "failed", "retryable": False, "error": {"why": "bad"}}),
    ("u3", {"outcome": "failed", "retryable": True}),  # its only attempt: FAILED
    ("u4", {"outcome": "unknown"}),
    ("k3", {"outcome": "succeeded", "result": {"text": 'é "q" 😀'}}),
    ("u1", {"outcome": "succeeded", "result": {"ok": 1}}),  # the same result again: duplicate
]
# Then the tasks those results promoted (s1 and r2) are claimed, started and reported with no
# result or error text at all: the batch without texts takes its own form of the update.
PLAIN_OUTCOMES = {
    "s1": {"outcome": "succeeded"},
    "r2": {"outcome": "failed", "retryable": False},
}


def run(client, tenant, batch: bool, claim_starts: bool = False, pad: str = "") -> dict:
    """The scenario through the single routes or the batch routes; with ``claim_starts`` the
    claims start what they grant, and the starts that follow are repeats (harmless); with
    ``pad`` every payload, result and error carries it as well."""
    post = lambda path, body: client.simulate_post(path, headers=tenant.headers, json=body)  # noqa: E731
    submissions = [
        (
            key,
            {**fields, "payload": {**fields.get("payload", {"n": 1}), "pad": pad}}
            if pad
            else fields,
        )
        for key, fields in SUBMISSIONS
    ]
    if batch:
        items = [
            {"idempotency_key": key, **task_body(tenant.queue_id, **fields)}
            for key, fields in submissions
        ]
        submitted = [
            (r["status"], r.get("data", {}).get("task_id"), r.get("error", {}).get("code"))
            for r in post("/v1/tasks/batch", {"tasks": items}).json["data"]["results"]
        ]
    else:
        submitted = []
        for key, fields in submissions:
            r = submit(client, tenant, key, None, **fields)
            submitted.append(
                (
                    r.status_code,
                    r.json.get("data", {}).get("task_id"),
                    r.json.get("error", {}).get("code"),
                )
            )
    tasks = {
        key: task for (key, _), (_, task, _) in zip(submissions, submitted, strict=True) if task
    }

    session = Session(client, tenant, capacity=20)
    claimed = session.claim(max=20, start=claim_starts)
    attempt_of = {tasks_key(tasks, a["task"]["task_id"]): a["attempt_id"] for a in claimed}
    states = {
        client.simulate_get(f"/v1/tasks/{a['task']['task_id']}", headers=tenant.headers).json[
            "data"
        ]["state"]
        for a in claimed
    }
    assert states == ({"RUNNING"} if claim_starts else {"LEASED"})
    starts = [attempt_of[k] for k in attempt_of] + [attempt_of["u1"]]  # u1 twice
    if batch:
        started = [
            (r["status"], r.get("data", {}).get("state"))
            for r in post(
                "/v1/attempts/start", {"session_id": session.id, "attempt_ids": starts}
            ).json["data"]["results"]
        ]
    else:
        started = [
            (r.status_code, r.json.get("data", {}).get("state"))
            for r in (session.start(a) for a in starts)
        ]
    outcomes = [(k, padded(body, pad)) for k, body in OUTCOMES]
    reported = report(post, session, batch, [(attempt_of[k], body) for k, body in outcomes])

    again = {
        tasks_key(tasks, a["task"]["task_id"]): a["attempt_id"]
        for a in session.claim(max=20, start=claim_starts)
    }
    for attempt in again.values():
        assert session.start(attempt).status_code == 200
    plain = [(again[k], body) for k, body in PLAIN_OUTCOMES.items() if k in again]
    return {
        "answers": {
            "submitted": [(status, code, task is not None) for status, task, code in submitted],
            "claimed": sorted(attempt_of),
            "started": started,
            "reported": reported,
            "claimed_again": sorted(again),
            "reported_plain": report(post, session, batch, plain),
        },
        "tasks": tasks,
        "session": session.id,
    }


def report(post, session, batch: bool, results: list[tuple[str, dict]]) -> list[tuple]:
    """The results through POST /v1/attempts/result (batch) or one call each; the answers."""
    if batch:
        items = [{"attempt_id": attempt, **body} for attempt, body in results]
        return [
            (r["status"], r.get("data", {}).get("duplicate"), r.get("error", {}).get("code"))
            for r in post("/v1/attempts/result", {"session_id": session.id, "results": items}).json[
                "data"
            ]["results"]
        ]
    answers = []
    for attempt, body in results:
        r = session.finish(attempt, **body)
        answers.append(
            (
                r.status_code,
                r.json.get("data", {}).get("duplicate"),
                r.json.get("error", {}).get("code"),
            )
        )
    return answers


def padded(body: dict, pad: str) -> dict:
    """The outcome with ``pad`` added to its result and error objects."""
    if not pad:
        return body
    return {k: {**v, "pad": pad} if k in ("result", "error") else v for k, v in body.items()}


def tasks_key(tasks: dict, public_id: str) -> str:
    return next(k for k, v in tasks.items() if v == public_id)


def snapshot(database, tenant, outcome: dict) -> dict:
    tasks = outcome["tasks"]
    name = {}
    rows = {}
    for key, public in tasks.items():
        [t] = database.query(
            "SELECT id, state, lane, concurrency_key, business_key, priority, attempts_used, "
            "max_attempts, deadline_at IS NOT NULL AS has_deadline, payload, result, error, "
            "available_at > created_at AS backing_off, finished_at IS NOT NULL AS finished "
            "FROM tasks WHERE public_id = %s",
            (public,),
        )
        name[t.pop("id")] = key
        rows[key] = t
    attempts = database.query(
        "SELECT task_id, attempt_number, state, outcome, retryable, result, error, "
        "concurrency_token, started_at IS NOT NULL AS started, finished_at IS NOT NULL AS finished "
        "FROM attempts WHERE namespace_id = %s ORDER BY task_id, attempt_number",
        (tenant.namespace_id,),
    )
    for a in attempts:
        a["task_id"] = name[a["task_id"]]
    keys = database.query(
        "SELECT concurrency_key, token, version, holder_attempt_id IS NOT NULL AS held, "
        "candidate_task_id FROM concurrency_resources WHERE namespace_id = %s "
        "ORDER BY concurrency_key",
        (tenant.namespace_id,),
    )
    for k in keys:
        k["candidate_task_id"] = name.get(k["candidate_task_id"])
    history = database.query(
        "SELECT task_id, event, from_state, to_state, actor LIKE 'session:%%' AS by_session, "
        "details, concurrency_token FROM task_history WHERE namespace_id = %s "
        "ORDER BY task_id, id",
        (tenant.namespace_id,),
    )
    for h in history:
        h["task_id"] = name[h["task_id"]]
        h["details"] = re.sub(r"[0-9.]+s$", "<delay>", h["details"] or "")
    [counters] = database.query(
        "SELECT a.unfinished_tasks AS app_unfinished, a.active_attempts AS app_active, "
        f"{QUEUE_COUNTS}, s.in_flight FROM applications a JOIN queues q ON q.public_id = %s "
        "JOIN worker_sessions s ON s.public_id = %s WHERE a.id = %s",
        (tenant.queue_id, outcome["session"], tenant.application_id),
    )
    permits = database.query(
        "SELECT t.public_id, p.kind FROM permits p JOIN attempts a ON a.id = p.attempt_id "
        "JOIN tasks t ON t.id = a.task_id WHERE a.namespace_id = %s ORDER BY t.id, p.kind",
        (tenant.namespace_id,),
    )
    return {
        "answers": outcome["answers"],
        "tasks": rows,
        "attempts": attempts,
        "keys": keys,
        "history": history,
        "counters": counters,
        "permits": [(tasks_key(tasks, p["public_id"]), p["kind"]) for p in permits],
    }


@pytest.mark.parametrize(
    "quotas, pad",
    [(False, ""), (True, ""), (False, LONG_TEXT)],
    ids=["unlimited", "quotas", "long-texts"],
)
def test_batch_routes_leave_what_the_single_routes_leave(
    client, database, tenant_factory, quotas, pad
):
    """Both routes alike, without quotas (no counters kept) and under quotas far above what the
    scenario reaches (the application's counters kept, and compared); and with payloads and
    texts long enough that each batch's item loop reads its items from batch_items rather
    than each out of the batch (batch_items_read)."""
    single, batched = tenant_factory(), tenant_factory()
    if quotas:
        for t in (single, batched):
            database.call("application_set_quota", t.application, 10**6, 10**6)
    one = snapshot(database, single, run(client, single, batch=False, pad=pad))
    many = snapshot(database, batched, run(client, batched, batch=True, pad=pad))
    # The scenario reached what it is about (so the comparison is not of two empty runs).
    assert [s for s, _, _ in one["answers"]["submitted"]] == [201] * 11 + [200, 409, 201, 201]
    # s1 promoted when s0 succeeded, r2 (priority 1) before r3 when r1 backed off: both
    # claimable again, and their plain results promoted s2 and r3 in turn.
    assert one["answers"]["claimed_again"] == ["r2", "s1"]
    assert (one["tasks"]["s1"]["state"], one["tasks"]["r2"]["state"]) == ("SUCCEEDED", "FAILED")
    assert (one["tasks"]["s2"]["lane"], one["tasks"]["r3"]["lane"]) == ("READY", "READY")
    assert one["tasks"]["r1"]["lane"] == "DELAYED" and one["tasks"]["r1"]["backing_off"]
    assert one["tasks"]["k1"]["error"] is None  # a success's error stays on the attempt
    assert one["tasks"]["u2"]["state"] == "WAITING" and one["tasks"]["u2"]["backing_off"]
    assert one["answers"]["reported"][-1][1] is True
    for part in one:
        assert many[part] == one[part], part


def test_a_claim_that_starts_leaves_what_a_claim_and_its_starts_leave(
    client, database, tenant_factory
):
    """W3: started in the claim's transaction, each attempt and task is RUNNING with a STARTED
    history row after its CLAIMED one, as a start of its own leaves it; a start after it is a
    repeat and changes nothing."""
    apart, together = tenant_factory(), tenant_factory()
    one = snapshot(database, apart, run(client, apart, batch=False))
    both = snapshot(database, together, run(client, together, batch=False, claim_starts=True))
    started = [h for h in both["history"] if h["event"] == "STARTED"]
    assert len(started) == len(both["answers"]["claimed"]) + len(both["answers"]["claimed_again"])
    for part in one:
        assert both[part] == one[part], part
