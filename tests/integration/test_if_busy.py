"""P5: a keyed submission chooses what a busy key does to it. ``wait`` (the default) parks it
(K4); ``skip`` accepts it ended at once, CANCELLED with reason KEY_BUSY, decided under the key
row's lock; the choice is part of the idempotency fingerprint."""

from __future__ import annotations

import secrets
import threading

from tests.helpers import Session, submit


def _task(client, tenant, task_id: str) -> dict:
    return client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]


def test_p5_skip_on_an_idle_key_waits_as_any_submission(client, tenant):
    made = submit(client, tenant, None, 201, concurrency_key="skip/idle", if_busy="skip")
    assert (made.json["data"]["state"], made.json["data"]["cancel_reason"]) == ("WAITING", None)
    [granted] = Session(client, tenant).claim()
    assert granted["task"]["task_id"] == made.json["data"]["task_id"]


def test_p5_skip_on_a_held_key_is_accepted_cancelled_and_replayed_as_such(client, tenant, database):
    submit(client, tenant, None, 201, concurrency_key="skip/held")
    Session(client, tenant).claim()  # the key is held
    idem = "skip-" + secrets.token_hex(4)
    made = submit(client, tenant, idem, 201, concurrency_key="skip/held", if_busy="skip")
    task = made.json["data"]
    assert (task["state"], task["cancel_reason"]) == ("CANCELLED", "KEY_BUSY")
    assert task["finished_at"] is not None
    again = submit(client, tenant, idem, 200, concurrency_key="skip/held", if_busy="skip")
    assert again.json["data"]["task_id"] == task["task_id"]
    assert again.json["data"]["cancel_reason"] == "KEY_BUSY"
    assert _task(client, tenant, task["task_id"])["cancel_reason"] == "KEY_BUSY"
    history = client.simulate_get(
        f"/v1/tasks/{task['task_id']}/history", headers=tenant.headers
    ).json["data"]
    assert [(h["event"], h["to_state"]) for h in history] == [("SUBMITTED", "CANCELLED")]
    # Nothing waits on the key for it: the key is held, not contended.
    key = client.simulate_get("/v1/keys/skip%2Fheld", headers=tenant.headers).json["data"]
    assert key["state"] == "held" and key["parked"]["count"] == 0


def test_p5_a_waiting_task_makes_the_key_busy_in_any_lane(client, tenant):
    """Busy is a holder or any waiting task of the key: the next READY one, a parked one, or
    one in backoff, whichever queue it is in."""
    submit(client, tenant, None, 201, concurrency_key="skip/ready")  # READY, nobody holds it
    skipped = submit(client, tenant, None, 201, concurrency_key="skip/ready", if_busy="skip")
    assert skipped.json["data"]["cancel_reason"] == "KEY_BUSY"
    other = client.simulate_post(
        "/v1/queues", json={"name": "q-" + secrets.token_hex(3)}, headers=tenant.headers
    ).json["data"]["queue_id"]
    across = submit(
        client, tenant, None, 201, concurrency_key="skip/ready", if_busy="skip", queue_id=other
    )
    assert across.json["data"]["cancel_reason"] == "KEY_BUSY"
    unkeyed = submit(client, tenant, None, 201, if_busy="skip")
    assert unkeyed.json["data"]["state"] == "WAITING"  # no key, nothing to be busy


def test_p5_if_busy_is_part_of_the_fingerprint_and_wait_is_the_request_without_it(client, tenant):
    idem = "fp-" + secrets.token_hex(4)
    submit(client, tenant, idem, 201, concurrency_key="skip/fp")
    submit(client, tenant, idem, 200, concurrency_key="skip/fp", if_busy="wait")
    conflict = submit(client, tenant, idem, 409, concurrency_key="skip/fp", if_busy="skip")
    assert conflict.json["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    refused = submit(client, tenant, None, 400, concurrency_key="skip/fp", if_busy="later")
    assert refused.json["error"]["details"][0]["field"] == "if_busy"


def test_p5_a_batch_decides_each_item_in_order(client, tenant):
    items = [
        {"idempotency_key": "b1-" + secrets.token_hex(3), "concurrency_key": "skip/batch"},
        {"idempotency_key": "b2-" + secrets.token_hex(3), "concurrency_key": "skip/batch",
         "if_busy": "skip"},
        {"idempotency_key": "b3-" + secrets.token_hex(3), "concurrency_key": "skip/free",
         "if_busy": "skip"},
        {"idempotency_key": "b4-" + secrets.token_hex(3), "concurrency_key": "skip/batch"},
    ]  # fmt: skip
    body = {
        "tasks": [
            {"queue_id": tenant.queue_id, "handler": "h", "handler_version": "v1",
             "payload_version": "v1", "payload": {}, **item}
            for item in items
        ]
    }  # fmt: skip
    answer = client.simulate_post("/v1/tasks/batch", json=body, headers=tenant.headers)
    results = answer.json["data"]["results"]
    assert [r["status"] for r in results] == [201, 201, 201, 201]
    states = [_task(client, tenant, r["data"]["task_id"]) for r in results]
    assert [(t["state"], t["cancel_reason"]) for t in states] == [
        ("WAITING", None),
        ("CANCELLED", "KEY_BUSY"),
        ("WAITING", None),
        ("WAITING", None),  # waits behind the first, as a plain submission does
    ]


def test_p5_two_concurrent_skips_of_an_idle_key_never_both_run(client, tenant, database):
    """Both lock the key row (made for the first of them on a new key): of each pair, one
    waits and the other is cancelled, never both waiting and never both cancelled."""

    def pair(key: str) -> list[dict]:
        answers: list[dict] = []
        start = threading.Barrier(2)

        def one() -> None:
            start.wait()
            made = submit(client, tenant, None, 201, concurrency_key=key, if_busy="skip")
            answers.append(made.json["data"])

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return answers

    for round_ in range(20):
        answers = pair(f"skip/race/{round_}-{secrets.token_hex(3)}")
        assert sorted(a["state"] for a in answers) == ["CANCELLED", "WAITING"], answers


def test_p5_replace_cancels_the_keys_waiting_tasks_of_its_handler_and_waits(client, tenant):
    """The holder runs on; the waiting tasks of the same handler, READY or parked, in any
    queue, end CANCELLED (REPLACED) naming the new task; another handler's task stays; the
    new task waits behind the holder as any submission."""
    held = submit(client, tenant, None, 201, concurrency_key="rep/a").json["data"]["task_id"]
    session = Session(client, tenant)
    [lease] = session.claim()
    assert lease["task"]["task_id"] == held
    other = client.simulate_post(
        "/v1/queues", json={"name": "q-" + secrets.token_hex(3)}, headers=tenant.headers
    ).json["data"]["queue_id"]
    parked = [
        submit(client, tenant, None, 201, concurrency_key="rep/a").json["data"]["task_id"],
        submit(client, tenant, None, 201, concurrency_key="rep/a", queue_id=other).json["data"][
            "task_id"
        ],
    ]
    kept = submit(client, tenant, None, 201, concurrency_key="rep/a", handler="other.job")
    idem = "rep-" + secrets.token_hex(4)
    new = submit(client, tenant, idem, 201, concurrency_key="rep/a", if_busy="replace")
    new_id = new.json["data"]["task_id"]
    assert new.json["data"]["state"] == "WAITING"
    for task_id in parked:
        read = _task(client, tenant, task_id)
        assert (read["state"], read["cancel_reason"], read["replaced_by_task_id"]) == (
            "CANCELLED",
            "REPLACED",
            new_id,
        )
        history = client.simulate_get(f"/v1/tasks/{task_id}/history", headers=tenant.headers).json[
            "data"
        ]
        assert history[-1]["details"] == f"if_busy=replace: replaced by task {new_id}"
    assert _task(client, tenant, kept.json["data"]["task_id"])["state"] == "WAITING"
    assert _task(client, tenant, held)["state"] == "LEASED"
    again = submit(client, tenant, idem, 200, concurrency_key="rep/a", if_busy="replace")
    assert again.json["data"]["task_id"] == new_id
    session.start(lease["attempt_id"])
    session.finish(lease["attempt_id"])
    # The key's next tasks run in order: the other handler's, then the replacement.
    [first] = session.claim()
    assert first["task"]["task_id"] == kept.json["data"]["task_id"]
    session.start(first["attempt_id"])
    session.finish(first["attempt_id"])
    [second] = session.claim()
    assert second["task"]["task_id"] == new_id


def test_p5_replace_gives_back_the_unfinished_count_of_a_limited_queue(client, tenant):
    limited = client.simulate_post(
        "/v1/queues",
        json={"name": "lim-" + secrets.token_hex(3), "max_unfinished": 5},
        headers=tenant.headers,
    ).json["data"]["queue_id"]
    for _ in range(3):
        submit(client, tenant, None, 201, concurrency_key="rep/lim", queue_id=limited)
    queue = client.simulate_get(f"/v1/queues/{limited}", headers=tenant.headers).json["data"]
    assert queue["unfinished_tasks"] == 3
    submit(client, tenant, None, 201, concurrency_key="rep/lim", if_busy="replace")
    queue = client.simulate_get(f"/v1/queues/{limited}", headers=tenant.headers).json["data"]
    assert queue["unfinished_tasks"] == 0


def test_p5_two_concurrent_replaces_leave_one_waiting(client, tenant):
    """Each cancels what waits under the key's lock: of two at once, the later replaces the
    earlier, never both waiting."""

    def pair(key: str) -> list[dict]:
        answers: list[dict] = []
        start = threading.Barrier(2)

        def one() -> None:
            start.wait()
            made = submit(client, tenant, None, 201, concurrency_key=key, if_busy="replace")
            answers.append(made.json["data"])

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return answers

    for round_ in range(20):
        answers = pair(f"rep/race/{round_}-{secrets.token_hex(3)}")
        states = sorted(_task(client, tenant, a["task_id"])["state"] for a in answers)
        assert states == ["CANCELLED", "WAITING"], answers


def test_p5_a_batch_replaces_item_by_item(client, tenant):
    def item(handler: str = "h", **fields) -> dict:
        return {
            "idempotency_key": "b-" + secrets.token_hex(4),
            "queue_id": tenant.queue_id,
            "handler": handler,
            "handler_version": "v1",
            "payload_version": "v1",
            "payload": {},
            "concurrency_key": "rep/batch",
            **fields,
        }

    body = {"tasks": [item(), item(), item(if_busy="replace"), item(handler="x")]}
    answer = client.simulate_post("/v1/tasks/batch", json=body, headers=tenant.headers)
    ids = [r["data"]["task_id"] for r in answer.json["data"]["results"]]
    reads = [_task(client, tenant, i) for i in ids]
    assert [(r["state"], r["cancel_reason"]) for r in reads] == [
        ("CANCELLED", "REPLACED"),
        ("CANCELLED", "REPLACED"),
        ("WAITING", None),
        ("WAITING", None),
    ]
    assert {r["replaced_by_task_id"] for r in reads[:2]} == {ids[2]}
