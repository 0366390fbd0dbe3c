"""Key rows reclaimed without a token going back (R5, K7, H1): an idle key row is deleted once
its window has passed and no task of its key is to run or to be resolved, its stripe's floor
raised in the same transaction; a key row made afterwards starts at the floor, read under a
lock, so every token granted after a deletion exceeds every token granted before it. The race
test runs deletion against re-creation of the same keys and checks every token against every
earlier one of its key."""

from __future__ import annotations

import random
import threading
import time

from orbit_shell.server import cleanup
from tests.conftest import set_epoch
from tests.engine import Engine

EPOCH = 2**40


def _windows(database, tenant, finished_for: int, keys_idle_for: int) -> None:
    database.call("namespace_retention", tenant.namespace_id, finished_for, keys_idle_for)


def _run(eng: Engine, session: str, key: str, outcome: str = "succeeded") -> int:
    """One task of ``key`` submitted, claimed, started and reported; its token."""
    eng.submit(key)
    [grant] = eng.claim(session, 1)
    eng.start(session, grant["attempt_id"])
    eng.result(session, grant["attempt_id"], outcome)
    return grant["concurrency_token"]


def _key_row(database, tenant, key: str) -> list[dict]:
    return database.query(
        "SELECT token FROM concurrency_resources WHERE namespace_id = %s AND concurrency_key = %s",
        (tenant.namespace_id, key),
    )


def test_r5_an_idle_key_row_goes_and_its_next_token_is_above_every_earlier_one(
    eng, database, tenant
):
    session, _ = eng.hello(capacity=1)
    tokens = [_run(eng, session, "r5/a") for _ in range(3)]
    assert tokens == [1, 2, 3]
    _windows(database, tenant, 3600, 3600)
    assert cleanup.run_pass(database, tenant.namespace_id)["concurrency_resources"] == 0
    _windows(database, tenant, 3600, 0)  # the key window alone: its finished tasks stay
    assert cleanup.run_pass(database, tenant.namespace_id)["concurrency_resources"] == 1
    assert _key_row(database, tenant, "r5/a") == []
    [floor] = database.query(
        "SELECT floor FROM key_floors WHERE namespace_id = %s AND stripe = CRC32('r5/a') MOD 16",
        (tenant.namespace_id,),
    )
    assert floor["floor"] == 3
    assert _run(eng, session, "r5/a") == 4  # made again at the floor: 4, not 1
    # The tasks that ran stay readable until their own window passes.
    assert database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND concurrency_key = 'r5/a'",
        (tenant.namespace_id,),
    ) == [{"n": 4}]


def test_r5_a_key_with_work_to_run_or_resolve_is_kept(eng, database, tenant):
    session, _ = eng.hello(capacity=4)
    _run(eng, session, "keep/review", "unknown")  # NEEDS_REVIEW
    eng.submit("keep/waiting")  # READY: the key's candidate
    eng.submit("keep/held")
    [held] = eng.claim(session, 4)[:1] or [None]
    assert held is not None
    _run(eng, session, "keep/backoff", "failed")  # FAILED: the key may go
    retry_key = "keep/retry"
    eng.submit(retry_key)
    grants = eng.claim(session, 4)
    for g in grants:
        if g["concurrency_key"] == retry_key:
            eng.start(session, g["attempt_id"])
            eng.result(session, g["attempt_id"], "failed", retryable=1)  # WAITING in backoff
    _windows(database, tenant, 3600, 0)
    cleanup.run_pass(database, tenant.namespace_id)
    left = {
        r["concurrency_key"]
        for r in database.query(
            "SELECT concurrency_key FROM concurrency_resources WHERE namespace_id = %s",
            (tenant.namespace_id,),
        )
    }
    assert {"keep/review", "keep/waiting", "keep/held", retry_key} <= left
    assert "keep/backoff" not in left


def test_r5_h1_an_epoch_still_starts_a_reclaimed_key_above_it(eng, database, tenant):
    session, _ = eng.hello(capacity=1)
    assert _run(eng, session, "ep/a") == 1
    _windows(database, tenant, 3600, 0)
    cleanup.run_pass(database, tenant.namespace_id)
    set_epoch(database, 2)
    try:
        assert _run(eng, session, "ep/a") == 2 * EPOCH
    finally:
        set_epoch(database, 0)


def test_r5_k7_deletion_raced_against_re_creation_never_sends_a_token_back(eng, database, tenant):
    """Two workers per key run its tasks, one at a time each with short random pauses, so
    that the key is now and then idle, while another thread reclaims every idle key row (key
    window 0) as fast as it can: the keys are deleted and made again many times, and two
    submissions may make one key at once. Per key, in the order the grants were made, every
    token must exceed every earlier one."""
    _windows(database, tenant, 3600, 0)
    keys = ["race/a", "race/b"]
    grants: dict[str, list[tuple[float, int]]] = {k: [] for k in keys}
    stop = threading.Event()
    errors: list[BaseException] = []
    reclaimed = [0]

    def work(n: int) -> None:
        try:
            session, _ = eng.hello(capacity=1, worker=f"race-{n}")
            key = keys[n % 2]
            while not stop.is_set():
                eng.submit(key)
                ran = 0
                while not ran and not stop.is_set():  # one task run per task submitted
                    for grant in eng.claim(session, 1):
                        grants[grant["concurrency_key"]].append(
                            (time.monotonic(), grant["concurrency_token"])
                        )
                        eng.start(session, grant["attempt_id"])
                        eng.result(session, grant["attempt_id"])
                        ran += 1
                time.sleep(random.uniform(0, 0.02))  # the key is idle meanwhile, now and then
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    def reclaim() -> None:
        try:
            while not stop.is_set():
                reclaimed[0] += cleanup.run_pass(database, tenant.namespace_id, pause=0, duty=1)[
                    "concurrency_resources"
                ]
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=reclaim))
    for t in threads:
        t.start()
    time.sleep(6)
    stop.set()
    for t in threads:
        t.join(30)
    assert errors == [], errors
    assert reclaimed[0] > 10, reclaimed  # the rows did go, again and again
    for key, seen in grants.items():
        tokens = [token for _, token in sorted(seen)]
        assert len(tokens) > 20, key
        went_back = [(a, b) for a, b in zip(tokens, tokens[1:], strict=False) if b <= a]
        assert went_back == [], (key, went_back[:5])
