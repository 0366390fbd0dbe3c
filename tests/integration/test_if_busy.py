"""P5: a keyed submission chooses what a busy key does to it. ``wait`` (the default) parks it
(K4); ``skip`` accepts it ended at once, CANCELLED with reason KEY_BUSY, decided under the key
row's lock; the choice is part of the idempotency fingerprint."""

from __future__ import annotations

import secrets
import threading
import time

import pymysql

from orbit_shell.engine import db
from orbit_shell.engine.schema import routine_name
from tests.helpers import Session, submit


def _task(client, tenant, task_id: str) -> dict:
    return client.simulate_get(f"/v1/tasks/{task_id}", headers=tenant.headers).json["data"]


def _raced_pair(client, tenant, key: str, if_busy: str) -> list[dict]:
    """Two submissions of ``key`` with ``if_busy``, sent at once from two threads."""
    answers: list[dict] = []
    start = threading.Barrier(2)

    def one() -> None:
        start.wait()
        made = submit(client, tenant, None, 201, concurrency_key=key, if_busy=if_busy)
        answers.append(made.json["data"])

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return answers


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

    for round_ in range(20):
        answers = _raced_pair(client, tenant, f"skip/race/{round_}-{secrets.token_hex(3)}", "skip")
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

    for round_ in range(20):
        key = f"rep/race/{round_}-{secrets.token_hex(3)}"
        answers = _raced_pair(client, tenant, key, "replace")
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


def test_p5_a_burst_on_one_key_runs_once_with_its_last_payload(client, tenant):
    """1,000 debounced submissions over five seconds: one task is left, the newest, and it
    becomes claimable only delay_ms after the last submission."""
    debounce = {"delay_ms": 1000, "max_wait_ms": 60_000}
    began = time.monotonic()
    ids = []
    for n in range(1000):
        due = began + n * 0.005
        time.sleep(max(0.0, due - time.monotonic()))
        made = submit(client, tenant, None, 201, concurrency_key="deb/burst", debounce=debounce,
                      payload={"n": n})  # fmt: skip
        ids.append(made.json["data"]["task_id"])
    session = Session(client, tenant)
    assert session.claim() == []  # the newest waits out its delay
    tasks = client.simulate_get(
        "/v1/tasks?concurrency_key=deb/burst&state=WAITING", headers=tenant.headers
    ).json["data"]["tasks"]
    assert [t["task_id"] for t in tasks] == [ids[-1]]
    time.sleep(1.2)
    [granted] = session.claim()
    assert granted["task"]["task_id"] == ids[-1] and granted["task"]["payload"] == {"n": 999}
    session.start(granted["attempt_id"])
    session.finish(granted["attempt_id"])
    assert session.claim() == []
    replaced = _task(client, tenant, ids[0])
    assert (replaced["cancel_reason"], replaced["replaced_by_task_id"]) == ("REPLACED", ids[1])


def test_p5_a_steady_stream_runs_at_least_every_max_wait(client, tenant):
    """A submission every 100 ms with delay_ms 500 never lets the delay pass; max_wait_ms 2,000
    still runs the newest about every two seconds."""
    debounce = {"delay_ms": 500, "max_wait_ms": 2000}
    session = Session(client, tenant)
    starts: list[float] = []
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            for grant in session.claim():
                starts.append(time.monotonic())
                session.start(grant["attempt_id"])
                session.finish(grant["attempt_id"])
            time.sleep(0.05)

    running = threading.Thread(target=worker)
    running.start()
    began = time.monotonic()
    try:
        for n in range(65):
            time.sleep(max(0.0, began + n * 0.1 - time.monotonic()))
            submit(client, tenant, None, 201, concurrency_key="deb/stream", debounce=debounce,
                   payload={"n": n})  # fmt: skip
        streamed = time.monotonic() - began
    finally:
        stop.set()
        running.join(30)
    # A run every max_wait while the stream lasts: the first at 2 s, then one 2 s after each.
    assert int(streamed // 2) - 1 <= len(starts) <= int(streamed // 2) + 1, (streamed, starts)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(1.5 <= g <= 3.0 for g in gaps), gaps


def test_p5_debounce_replaces_unless_if_busy_says_otherwise(client, tenant):
    """Left out, if_busy is replace for a debounced submission; said, it governs the busy key
    and the debounce only delays; without a key each submission is a burst of its own."""
    debounce = {"delay_ms": 60_000, "max_wait_ms": 120_000}
    alone = submit(client, tenant, None, 201, debounce=debounce).json["data"]
    assert alone["state"] == "WAITING" and alone["available_at"] > alone["created_at"]
    first = submit(client, tenant, None, 201, concurrency_key="deb/x", debounce=debounce)
    kept = submit(client, tenant, None, 201, concurrency_key="deb/x", debounce=debounce,
                  if_busy="wait")  # fmt: skip
    assert _task(client, tenant, first.json["data"]["task_id"])["state"] == "WAITING"
    skipped = submit(client, tenant, None, 201, concurrency_key="deb/x", debounce=debounce,
                     if_busy="skip")  # fmt: skip
    assert skipped.json["data"]["cancel_reason"] == "KEY_BUSY"
    idem = "deb-" + secrets.token_hex(4)
    last = submit(client, tenant, idem, 201, concurrency_key="deb/x", debounce=debounce)
    for earlier in (first, kept):
        read = _task(client, tenant, earlier.json["data"]["task_id"])
        assert read["replaced_by_task_id"] == last.json["data"]["task_id"]
    submit(client, tenant, idem, 200, concurrency_key="deb/x", debounce=debounce, if_busy="replace")
    unknown = submit(client, tenant, None, 400, concurrency_key="deb/x",
                     debounce={"delay_ms": 1, "max_wait_ms": 1, "jitter": 1})  # fmt: skip
    assert unknown.json["error"]["details"][0]["field"] == "debounce.jitter"


def test_p5_debounce_leaves_a_ready_task_to_run_and_begins_a_new_burst(client, tenant, database):
    """A debounced task whose time came (let in READY by the due sweep) has ended its burst: the
    next submission does not replace it but begins a burst of its own."""
    first = submit(client, tenant, None, 201, concurrency_key="deb/ended",
                   debounce={"delay_ms": 1, "max_wait_ms": 60_000}, payload={"n": 1})  # fmt: skip
    first_id = first.json["data"]["task_id"]
    time.sleep(0.05)
    database.call("lease_sweep", 100)  # the due sweep lets it in: READY, not yet claimed
    [row] = database.query(
        "SELECT lane FROM tasks WHERE public_id = %s", (first_id,)
    )  # fmt: skip
    assert row["lane"] == "READY"
    later_burst = {"delay_ms": 60_000, "max_wait_ms": 120_000}
    second = submit(client, tenant, None, 201, concurrency_key="deb/ended",
                    debounce=later_burst, payload={"n": 2})  # fmt: skip
    assert _task(client, tenant, first_id)["state"] == "WAITING"
    later = _task(client, tenant, second.json["data"]["task_id"])
    assert later["waiting_until"] is not None and later["available_at"] > later["created_at"]
    [granted] = Session(client, tenant).claim()
    assert granted["task"]["task_id"] == first_id and granted["task"]["payload"] == {"n": 1}


def test_p5_the_due_sweep_takes_the_key_row_before_the_task(client, tenant, database, orbit_dsn):
    """A replacing submission holds the key row and then locks the key's DELAYED tasks; a due
    sweep that locked such a task and then waited for the key row closed a cycle with it, which
    SKIP LOCKED does not break on MariaDB. While the sweep waits for the key row, the task's row
    is free to the key's holder."""
    made = submit(client, tenant, None, 201, concurrency_key="deb/order",
                  debounce={"delay_ms": 1, "max_wait_ms": 60_000})  # fmt: skip
    task_id = made.json["data"]["task_id"]
    time.sleep(0.05)
    holder = db.connect(orbit_dsn, autocommit=False)
    sweeper = db.connect(orbit_dsn, init_command="SET innodb_lock_wait_timeout = 10")
    outcome: list = []
    try:
        with holder.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 2")
            cur.execute(
                "SELECT id FROM concurrency_resources WHERE namespace_id = %s "
                "AND concurrency_key = 'deb/order' FOR UPDATE",
                (tenant.namespace_id,),
            )

        def sweep() -> None:
            try:
                with sweeper.cursor() as cur:
                    cur.execute(f"CALL {routine_name('lease_sweep')}(100)")
                    outcome.append(cur.fetchall())
            except pymysql.err.OperationalError as exc:
                outcome.append(exc)

        running = threading.Thread(target=sweep)
        running.start()
        time.sleep(0.5)  # the sweep is waiting for the key row
        assert running.is_alive() and not outcome
        with holder.cursor() as cur:
            cur.execute("SELECT lane FROM tasks WHERE public_id = %s FOR UPDATE", (task_id,))
            assert cur.fetchall() == [{"lane": "DELAYED"}]
        holder.rollback()
        running.join(30)
        assert not isinstance(outcome[0], Exception), outcome
    finally:
        holder.rollback()
        holder.close()
        sweeper.close()
    [row] = database.query("SELECT lane FROM tasks WHERE public_id = %s", (task_id,))
    assert row["lane"] == "READY"
