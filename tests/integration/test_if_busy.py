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
