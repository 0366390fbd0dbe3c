"""L1: an answer that carries task payloads (a claim's grants, hello's in-flight attempts)
carries at most a request body's bound of them, 1 MiB, beyond its first task. One server
worker builds each answer while the other requests it serves wait: a claim of 100 tasks of
1 MiB each answered 100 MiB and held another tenant's reads for a second."""

from __future__ import annotations

import json
import secrets

import pytest

from orbit_shell import errors
from orbit_shell.validation import MAX_BODY_BYTES
from tests.engine import submit_item, succeeded_items

KB300 = json.dumps({"blob": "x" * 300_000})  # three fit the budget, four do not


@pytest.fixture
def big(eng, database):
    """Submit ``n`` tasks whose payloads are ``payload`` (optionally of ``key``) in one batch;
    their public ids in order."""

    def submit(n: int, payload: str = KB300, key: str = "", queue: str | None = None):
        queue_id = eng.ids[queue or eng.queue]
        items = [submit_item(queue_id, key, payload=payload) for _ in range(n)]
        [rows] = database.call("task_submit_many", eng.t.namespace_id, "t", json.dumps(items))
        return [r["task_id"] for r in rows]

    return submit


def _bytes(rows: list[dict]) -> int:
    return sum(len(r["payload"].encode()) for r in rows)


def _claim_started(eng, session: str, n: int) -> list[dict]:
    [rows] = eng.db.call("worker_claim", eng.t.namespace_id, session, n, 1)
    return rows


def test_l1_a_claim_grants_what_fits_the_budget_and_always_one(eng, big):
    queue, _ = eng.queue_create()
    big(5, queue=queue)
    session, _ = eng.hello([queue], capacity=20)
    first = eng.claim(session, 10)
    assert len(first) == 3 and _bytes(first) <= MAX_BODY_BYTES  # 10 without the budget
    assert len(eng.claim(session, 10)) == 2  # the rest, in a claim of their own
    alone = big(1, payload=json.dumps({"blob": "y" * (MAX_BODY_BYTES + 1000)}), queue=queue)
    big(1, payload="{}", queue=queue)
    [granted] = eng.claim(session, 10)  # larger than the budget by itself: granted alone
    assert granted["task_id"] == alone[0]


def test_l1_the_budget_holds_on_the_one_by_one_path_and_for_tasks_measured_late(eng, big, database):
    """A late candidate (its deadline passed) sends the grant down the one-by-one path; a task
    submitted before payload_bytes existed (NULL) is measured by reading its payload."""
    queue, _ = eng.queue_create()
    ids = big(5, queue=queue)
    eng.force(
        "UPDATE tasks SET deadline_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE public_id = %s",
        ids[0],
    )
    eng.force("UPDATE tasks SET payload_bytes = NULL WHERE public_id IN (%s, %s)", *ids[1:3])
    session, _ = eng.hello([queue], capacity=20)
    granted = eng.claim(session, 10)
    assert [g["task_id"] for g in granted] == ids[1:4]  # 4 of 300 KB would pass 1 MiB
    assert eng.task(ids[0])["state"] != "LEASED"


def test_l1_a_report_and_claim_grants_within_the_budget(eng, big, database):
    queue, _ = eng.queue_create()
    big(2, key="budget/a", queue=queue)
    big(2, key="budget/b", queue=queue)
    big(2, key="budget/c", queue=queue)
    big(2, key="budget/d", queue=queue)
    session, _ = eng.hello([queue], capacity=20)
    held = _claim_started(eng, session, 10)
    assert len(held) == 3
    held += _claim_started(eng, session, 10)
    assert len(held) == 4  # one per key
    ns = eng.t.namespace_id
    items = succeeded_items([h["attempt_id"] for h in held])
    answers, granted = database.call("worker_report_claim", ns, session, items, 10, 1)[:2]
    assert all(a["item_error"] is None for a in answers)
    assert len(granted) == 3 and _bytes(granted) <= MAX_BODY_BYTES  # the four keys' next


def test_l1_hello_answers_the_in_flight_attempts_a_page_at_a_time(eng, big, database):
    queue, _ = eng.queue_create()
    big(5, queue=queue)
    worker = "pages-" + secrets.token_hex(3)
    session, _ = eng.hello([queue], capacity=20, worker=worker)
    claims = _claim_started(eng, session, 10) + _claim_started(eng, session, 10)
    claimed = [a["attempt_id"] for a in claims]
    assert len(claimed) == 5

    def hello(after: str | None):
        head, rows = database.call(
            "worker_hello",
            eng.t.namespace_id,
            eng.t.application_id,
            worker,
            20,
            1,
            json.dumps([queue]),
            "0" * 64,
            after,
        )
        return head[0], rows

    head, page = hello(None)
    assert head["session_id"] == session
    assert [r["attempt_id"] for r in page] == claimed[:3] and _bytes(page) <= MAX_BODY_BYTES
    assert head["in_flight_after"] == claimed[2]
    head, page = hello(claimed[2])
    assert [r["attempt_id"] for r in page] == claimed[3:] and head["in_flight_after"] is None
    eng.result(session, claimed[3])  # finished between pages: in none
    head, page = hello(claimed[2])
    assert [r["attempt_id"] for r in page] == claimed[4:] and head["in_flight_after"] is None


def test_l1_a_hello_whose_page_cursor_is_not_its_attempt_changes_nothing(eng, big, database):
    queue, _ = eng.queue_create()
    big(2, queue=queue)
    mine = "cursor-" + secrets.token_hex(3)
    session, _ = eng.hello([queue], capacity=4, worker=mine)
    other, _ = eng.hello([queue], capacity=4)
    [theirs] = eng.claim(other, 1)
    for cursor in (theirs["attempt_id"], "0" * 32):
        with pytest.raises(errors.NotFound):
            database.call(
                "worker_hello",
                eng.t.namespace_id,
                eng.t.application_id,
                mine,
                9,  # a new capacity: refused with the rest
                1,
                json.dumps([queue]),
                "1" * 64,
                cursor,
            )
    [row] = database.query(
        "SELECT capacity, registration_sha256 FROM worker_sessions WHERE public_id = %s",
        (session,),
    )
    assert row == {"capacity": 4, "registration_sha256": "0" * 64}


def test_l1_an_attempt_list_carries_results_within_the_budget_and_says_what_it_left_out(
    eng, big, database, client, tenant
):
    """Each of a task's attempts may carry a result of up to 1 MiB, and a task up to 100
    attempts: the list carries results and errors within the budget (the first attempt's
    whatever their size) and marks the attempts past it, which their own read answers whole."""
    queue, _ = eng.queue_create()
    [task] = big(1, payload="{}", queue=queue)
    eng.force("UPDATE tasks SET max_attempts = 5 WHERE public_id = %s", task)
    session, _ = eng.hello([queue], capacity=4)
    text = json.dumps({"blob": "r" * 400_000})  # two fit the budget, three do not
    for _ in range(4):
        eng.due(task)
        [granted] = _claim_started(eng, session, 1)
        database.call(
            "attempt_result",
            eng.t.namespace_id,
            session,
            granted["attempt_id"],
            "failed",
            1,
            text,
            None,
        )
    url = f"/v1/tasks/{task}/attempts"
    listed = client.simulate_get(url, headers=tenant.headers).json["data"]
    assert [a["attempt_number"] for a in listed] == [1, 2, 3, 4]
    assert [a["result"] is not None for a in listed] == [True, True, False, False]
    assert ["detail_omitted" in a for a in listed] == [False, False, True, True]
    assert all(a["outcome"] == "failed" for a in listed)  # the rest of each is there
    third = client.simulate_get(url + "/3", headers=tenant.headers).json["data"]
    assert third["result"] == json.loads(text) and "detail_omitted" not in third
