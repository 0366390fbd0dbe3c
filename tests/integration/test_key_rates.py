"""P6: a key policy's rate: at most R permits of a key begin in any T seconds. A task waiting for
the rate says so (waiting_until, V2) and stays out of every claim (P4); the rate is used, not
only capped; other keys' tasks are claimed meanwhile."""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
import urllib.parse

import pytest

from tests.helpers import Session, submit

PERMITS, SECONDS = 3, 2


def _policy(client, tenant, expect=201, **body):
    answer = client.simulate_post("/v1/key-policies", json=body, headers=tenant.headers)
    assert answer.status_code == expect, answer.text
    return answer.json["data"] if expect < 300 else answer.json["error"]


def _key(client, tenant, key):
    path = "/v1/keys/" + urllib.parse.quote(key, safe="")
    return client.simulate_get(path, headers=tenant.headers).json["data"]


def _starts(database, tenant, key) -> list[dt.datetime]:
    return [
        r["created_at"]
        for r in database.query(
            "SELECT a.created_at FROM attempts a JOIN tasks t ON t.id = a.task_id "
            "WHERE t.namespace_id = %s AND t.concurrency_key = %s ORDER BY a.created_at",
            (tenant.namespace_id, key),
        )
    ]


@pytest.mark.parametrize(
    "rate",
    [
        {"permits": 0, "per_seconds": 1},
        {"permits": 1001, "per_seconds": 1},
        {"permits": 1, "per_seconds": 0},
        {"permits": 1, "per_seconds": 86_401},
        {"permits": 1},
        {"permits": 1, "per_seconds": 1, "burst": 2},
        [1, 1],
    ],
)
def test_p6_a_bad_rate_is_a_clear_400_and_changes_nothing(client, tenant, rate):
    error = _policy(client, tenant, 400, key="r", limit=1, rate=rate)
    assert error["code"] == "INVALID_ARGUMENT" and "rate" in error["message"]
    assert client.simulate_get("/v1/key-policies", headers=tenant.headers).json["data"] == []


def test_p6_at_most_r_permits_begin_in_any_t_seconds_and_the_rate_is_used(client, tenant, database):
    key = "rated/" + secrets.token_hex(3)
    made = _policy(
        client, tenant, key=key, limit=2, rate={"permits": PERMITS, "per_seconds": SECONDS}
    )
    assert made["rate"] == {"permits": PERMITS, "per_seconds": SECONDS}
    for _ in range(20):  # a backlog longer than the run
        submit(client, tenant, concurrency_key=key)
    others: list[str] = []
    stop = threading.Event()
    errors: list[str] = []

    def worker() -> None:
        session = Session(client, tenant, capacity=8)
        try:
            while not stop.is_set():
                for a in session.claim(max=8, start=True):
                    answer = session.finish(a["attempt_id"])
                    if answer.status_code != 200:
                        errors.append(answer.text)
                time.sleep(0.02)
        except Exception as exc:  # noqa: BLE001 - the test fails on it below
            errors.append(repr(exc))

    thread = threading.Thread(target=worker)
    thread.start()
    began = time.time()
    waited_seen = False
    while time.time() - began < 3.5 * SECONDS:
        others.append(
            submit(client, tenant, concurrency_key="free/" + secrets.token_hex(3)).json["data"][
                "task_id"
            ]
        )
        view = _key(client, tenant, key)
        if view["next_permit_at"] and view["ready_task_id"]:
            task = client.simulate_get(
                f"/v1/tasks/{view['ready_task_id']}", headers=tenant.headers
            ).json["data"]
            if task["state"] == "WAITING" and task.get("waiting_for_rate"):
                assert task["waiting_until"] == view["next_permit_at"]
                waited_seen = True
        time.sleep(0.1)
    time.sleep(0.3)
    stop.set()
    thread.join(30)
    assert not errors, errors[:3]
    assert waited_seen, "no task was seen waiting for the rate"
    starts = _starts(database, tenant, key)
    window = dt.timedelta(seconds=SECONDS)
    # Capped: any R + 1 consecutive starts span at least T.
    for first, last in zip(starts, starts[PERMITS:], strict=False):
        assert last - first >= window, (first, last)
    # Used: each whole window of the run, from the first start, saw at least R - 1 starts.
    whole = int((starts[-1] - starts[0]) / window)
    assert whole >= 3, starts
    for k in range(whole):
        begin = starts[0] + k * window
        count = sum(1 for s in starts if begin <= s < begin + window)
        assert PERMITS - 1 <= count <= PERMITS, (k, count, starts)
    # Other keys' tasks ran meanwhile, not behind the rated backlog (P4).
    [left] = database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE public_id IN ("
        + ", ".join(["%s"] * len(others))
        + ") AND state <> 'SUCCEEDED'",
        others,
    )
    assert left["n"] == 0


def test_p6_removing_a_rate_starts_its_waiting_task_at_once(client, tenant):
    key = "unrate/" + secrets.token_hex(3)
    made = _policy(client, tenant, key=key, limit=1, rate={"permits": 1, "per_seconds": 3600})
    for _ in range(2):
        submit(client, tenant, concurrency_key=key)
    session = Session(client, tenant, capacity=4)
    [first] = session.claim(max=4, start=True)
    assert session.finish(first["attempt_id"]).status_code == 200
    assert session.claim(max=4) == []  # the next waits an hour for the rate
    view = _key(client, tenant, key)
    assert view["rate"] == {"permits": 1, "per_seconds": 3600} and view["next_permit_at"]
    answer = client.simulate_put(
        f"/v1/key-policies/{made['policy_id']}",
        json={"key": key, "limit": 1},
        headers=tenant.headers,
    )
    assert answer.status_code == 200 and answer.json["data"]["rate"] is None
    [second] = session.claim(max=4)
    assert second["task"]["concurrency_key"] == key
    assert _key(client, tenant, key)["rate"] is None
