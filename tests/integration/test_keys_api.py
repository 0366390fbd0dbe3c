"""Keys over the API (V1): GET /v1/keys/{concurrency_key} shows who holds a key, with which
token, since when, its READY task and what is parked behind it; byte-exact (K2), scoped by
namespace and queue (SPEC 1), read-only (no unlock, no token reset: K6, K7)."""

from __future__ import annotations

import base64
from urllib.parse import quote

from tests.helpers import Session, limited_credential, submit


def _key(client, headers, key: str):
    return client.simulate_get("/v1/keys/" + quote(key, safe=""), headers=headers)


def test_v1_a_key_shows_its_holder_token_ready_and_parked_tasks(client, tenant):
    ids = [
        submit(client, tenant, None, 201, concurrency_key="obj/1 é").json["data"]["task_id"]
        for _ in range(3)
    ]
    session = Session(client, tenant, capacity=1, worker_id="key-worker")
    idle = _key(client, tenant.headers, "obj/1 é").json["data"]
    # Free, with a READY candidate and two tasks parked behind it: contended, not held.
    assert (idle["state"], idle["holder"], idle["ready_task_id"]) == ("contended", None, ids[0])
    assert idle["parked"]["count"] == 2 and idle["highest_token"] == "0"
    [granted] = session.claim(1)
    key = _key(client, tenant.headers, "obj/1 é").json["data"]
    assert key["state"] == "contended" and key["highest_token"] == "1"
    holder = key["holder"]
    assert holder["task_id"] == ids[0] and holder["attempt_id"] == granted["attempt_id"]
    assert holder["concurrency_token"] == "1" and holder["attempt_state"] == "LEASED"
    assert holder["session_id"] == session.id and holder["worker_id"] == "key-worker"
    assert holder["since"] and holder["lease_expires_at"] == granted["lease_expires_at"]
    assert key["ready_task_id"] is None
    assert key["parked"] == {
        "count": 2,
        "count_is_lower_bound": False,
        "oldest_task_id": ids[1],
        "oldest_since": key["parked"]["oldest_since"],
    }
    session.start(granted["attempt_id"])
    session.finish(granted["attempt_id"])
    after = _key(client, tenant.headers, "obj/1 é").json["data"]
    assert (after["state"], after["ready_task_id"], after["parked"]["count"]) == (
        "contended",
        ids[1],
        1,
    )
    assert after["highest_token"] == "1"  # the next grant takes 2; nothing resets it


def test_v1_keys_are_byte_exact_scoped_and_404_when_never_used(
    client, tenant, tenant_factory, database
):
    submit(client, tenant, None, 201, concurrency_key="Case/Key")
    assert _key(client, tenant.headers, "Case/Key").status_code == 200
    for other in ("case/key", "Case/Key ", "never/used", "bad\x01key"):
        assert _key(client, tenant.headers, other).status_code == 404, other
    stranger = tenant_factory()
    assert _key(client, stranger.headers, "Case/Key").status_code == 404
    mine = limited_credential(database, tenant, "tasks:read")  # the tenant's first queue
    assert _key(client, mine, "Case/Key").status_code == 200
    q2 = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "k2"})
    submit(client, tenant, None, 201, queue_id=q2.json["data"]["queue_id"], concurrency_key="q2/k")
    assert _key(client, tenant.headers, "q2/k").status_code == 200
    assert _key(client, mine, "q2/k").status_code == 404  # none of its tasks in my queues
    assert client.simulate_delete("/v1/keys/Case%2FKey", headers=tenant.headers).status_code == 405


def _list(client, headers, **params):
    result = client.simulate_get("/v1/keys", headers=headers, params=params)
    assert result.status_code == 200, result.text
    return result.json["data"]


def _walk(client, headers, **params) -> list[str]:
    """Every key of a listing, one page of one key at a time through the cursors."""
    seen, cursor = [], None
    while True:
        page = _list(client, headers, limit=1, **params, **({"cursor": cursor} if cursor else {}))
        seen += [k["concurrency_key"] for k in page["keys"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


def _waiting_since(database, tenant, key: str):
    [row] = database.query(
        "SELECT r.waiting_since FROM concurrency_resources r JOIN queues q "
        "ON q.namespace_id = r.namespace_id WHERE q.public_id = %s AND r.concurrency_key = %s",
        (tenant.queue_id, key),
    )
    return row["waiting_since"]


def test_v1_key_list_orders_busy_keys_by_longest_wait_and_pages_them(client, tenant, database):
    for key in ("a/1", "a/1", "b/2", "b/2", "b/2"):  # a/1 parks first, then b/2
        submit(client, tenant, None, 201, concurrency_key=key)
    session = Session(client, tenant, capacity=8)
    submit(client, tenant, None, 201, concurrency_key="c/3")
    grants = {g["task"]["concurrency_key"]: g for g in session.claim(8)}
    assert sorted(grants) == ["a/1", "b/2", "c/3"]  # c/3 is held; nothing waits for it
    submit(client, tenant, None, 201, concurrency_key="d/4")  # READY, nothing parked: idle

    busy = _list(client, tenant.headers)
    assert [(k["concurrency_key"], k["state"]) for k in busy["keys"]] == [
        ("a/1", "contended"),
        ("b/2", "contended"),
        ("c/3", "held"),
    ]
    assert busy["keys"][1]["parked"]["count"] == 2 and busy["next_cursor"] is None
    assert busy["keys"][2]["holder"]["concurrency_token"] == "1"
    assert _walk(client, tenant.headers) == ["a/1", "b/2", "c/3"]
    assert _walk(client, tenant.headers, state="contended") == ["a/1", "b/2"]
    assert _walk(client, tenant.headers, state="held") == ["a/1", "b/2", "c/3"]
    assert _walk(client, tenant.headers, state="idle") == ["d/4"]
    assert _walk(client, tenant.headers, prefix="b/") == ["b/2"]
    assert _walk(client, tenant.headers, state="idle", prefix="a") == []

    # a/1's parked task is promoted by the release: nothing parked, nothing held, so it leaves
    # the busy list; its waiting_since goes when a release finds nothing left to promote.
    session.start(grants["a/1"]["attempt_id"])
    assert session.finish(grants["a/1"]["attempt_id"]).status_code == 200
    assert _walk(client, tenant.headers) == ["b/2", "c/3"]
    assert _waiting_since(database, tenant, "a/1") is not None
    [next_a] = [g for g in session.claim(8) if g["task"]["concurrency_key"] == "a/1"]
    session.start(next_a["attempt_id"])
    assert session.finish(next_a["attempt_id"]).status_code == 200
    assert _waiting_since(database, tenant, "a/1") is None
    assert "a/1" in _walk(client, tenant.headers, state="idle")


def test_v1_key_list_cancelling_the_last_parked_task_ends_the_wait(client, tenant, database):
    first, parked = (
        submit(client, tenant, None, 201, concurrency_key="x/1").json["data"]["task_id"]
        for _ in range(2)
    )
    assert _waiting_since(database, tenant, "x/1") is not None
    for task in (parked, first):  # the parked one, then the READY candidate
        cancel = client.simulate_post(f"/v1/tasks/{task}/cancel", headers=tenant.headers)
        assert cancel.status_code == 200, cancel.text
    assert _waiting_since(database, tenant, "x/1") is None
    assert _walk(client, tenant.headers) == []
    assert _walk(client, tenant.headers, state="idle") == ["x/1"]


def test_v1_key_list_is_scoped_and_refuses_bad_parameters(client, tenant, tenant_factory, database):
    for _ in range(2):
        submit(client, tenant, None, 201, concurrency_key="mine/1")
    q2 = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "k2"})
    for _ in range(2):
        submit(
            client, tenant, None, 201, queue_id=q2.json["data"]["queue_id"], concurrency_key="q2/1"
        )
    assert _walk(client, tenant.headers) == ["mine/1", "q2/1"]
    assert _walk(client, limited_credential(database, tenant, "tasks:read")) == ["mine/1"]
    stranger = tenant_factory()
    assert _walk(client, stranger.headers) == []
    assert _walk(client, stranger.headers, state="idle") == []
    for params in (
        {"state": "stuck"},
        {"cursor": "12"},
        {"cursor": "1.a+b"},
        {"cursor": "99999999999999999.1"},
        {"limit": "0"},
        {"prefix": ""},
        {"sort": "name"},
    ):
        result = client.simulate_get("/v1/keys", headers=tenant.headers, params=params)
        assert result.status_code == 400, (params, result.text)
        assert result.json["error"]["code"] == "INVALID_ARGUMENT"
    assert client.simulate_get("/v1/keys").status_code == 401


def test_v1_a_key_list_cursor_carries_a_key_the_credential_may_see_not_a_row_id(
    client, tenant, tenant_factory, database
):
    """A key page's cursor names its last key. It carried the key row's id, one sequence for
    the whole server, so a tenant paging its keys saw how many keys every tenant had made. A
    cursor naming a key another namespace uses, or one whose tasks are all outside the
    credential's queues, is 404 like one naming a key never used (SPEC 1: nothing tells them
    apart)."""
    for key in ("p/1", "p/1", "p/2", "p/2", "p/é"):  # contended, then idle once drained
        submit(client, tenant, None, 201, concurrency_key=key)
    stranger = tenant_factory()
    submit(client, stranger, None, 201, concurrency_key="theirs/1")
    q2 = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "kc"})
    submit(client, tenant, None, 201, queue_id=q2.json["data"]["queue_id"], concurrency_key="q/2")
    limited = limited_credential(database, tenant, "tasks:read")
    first = _list(client, limited, limit=1)
    [row] = database.query(
        "SELECT id FROM concurrency_resources WHERE concurrency_key = %s",
        (first["keys"][0]["concurrency_key"],),
    )
    assert str(row["id"]) not in first["next_cursor"].split(".")
    assert _walk(client, limited) == ["p/1", "p/2"]
    assert _walk(client, limited, state="idle") == ["p/é"]

    def cursor_of(key: str) -> str:
        return first["next_cursor"].split(".")[0] + "." + _b64(key)

    assert _list(client, limited, cursor=cursor_of("p/1"))["keys"][0]["concurrency_key"] == "p/2"
    unseen = [
        client.simulate_get("/v1/keys", headers=limited, params={"cursor": cursor})
        for cursor in [cursor_of(k) for k in ("theirs/1", "q/2", "never/used")] + ["1.x"]
    ]
    assert {(r.status_code, r.json["error"]["message"]) for r in unseen} == {
        (404, "the cursor names no key this credential can read")
    }
    assert _walk(client, tenant.headers, state="idle") == ["p/é", "q/2"]


def _b64(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode()


def test_v1_l4_a_limited_credential_sees_an_idle_key_of_its_own_queues(client, tenant, database):
    """It read the key's tasks but got 404 for the key once nothing held or waited for it."""
    mine = limited_credential(database, tenant, "tasks:read")
    task = submit(client, tenant, None, 201, concurrency_key="idle/mine").json["data"]["task_id"]
    session = Session(client, tenant, capacity=1)
    [grant] = session.claim(1, start=True)
    assert session.finish(grant["attempt_id"]).status_code == 200
    assert client.simulate_get(f"/v1/tasks/{task}", headers=mine).status_code == 200
    shown = _key(client, mine, "idle/mine")
    assert shown.status_code == 200, shown.text
    assert shown.json["data"]["concurrency_key"] == "idle/mine"
    q2 = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "idle-q2"})
    submit(client, tenant, None, 201, queue_id=q2.json["data"]["queue_id"], concurrency_key="i/2")
    other = Session(client, tenant, queue_ids=[q2.json["data"]["queue_id"]], capacity=1)
    [grant] = other.claim(1, start=True)
    assert other.finish(grant["attempt_id"]).status_code == 200
    assert _key(client, mine, "i/2").status_code == 404  # idle, and none of its tasks mine


def test_v1_l1_idle_keys_of_some_queues_never_read_the_other_queues_keys(
    client, tenant, database, orbit_dsn
):
    """A credential limited to some queues paged idle keys by walking every idle key of the
    namespace, three queries each: 48 s for an empty page at 30,000 idle keys of other
    queues. Its idle keys now come from its own queues' tasks (byte order), so the other
    queues' 3,000 idle keys here cost it no read."""
    import secrets

    from orbit_shell.engine.db import Database
    from orbit_shell.server.auth import authenticate
    from orbit_shell.server.keypages import KeyPages
    from orbit_shell.server.scoped import Scope
    from tests.integration.test_queue_counts import index_reads

    for key in ("own/b", "own/a", "own/é"):
        submit(client, tenant, None, 201, concurrency_key=key)
    session = Session(client, tenant, capacity=3)
    for grant in session.claim(3, start=True):
        assert session.finish(grant["attempt_id"]).status_code == 200
    q2 = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "many-idle"})
    [queue] = database.query(
        "SELECT id FROM queues WHERE public_id = %s", (q2.json["data"]["queue_id"],)
    )
    tag = secrets.token_hex(4)
    _finished_keyed_tasks(
        database, tenant, queue["id"], [f"other/{tag}/{n:05}" for n in range(3_000)]
    )
    mine = limited_credential(database, tenant, "tasks:read")
    assert _walk(client, mine, state="idle") == ["own/a", "own/b", "own/é"]
    assert _walk(client, mine, state="idle", prefix="own/b") == ["own/b"]
    one = Database(orbit_dsn, pool_size=1, max_open=1)
    try:
        scope = Scope(one, authenticate(one, mine["Authorization"]))
        with one.connection() as c:
            before = index_reads(c)
        found, cursor = KeyPages(scope, None).page("idle", None, 50)
        with one.connection() as c:
            reads = index_reads(c) - before
    finally:
        one.close()
    assert [k["concurrency_key"] for k in found] == ["own/a", "own/b", "own/é"] and not cursor
    assert reads < 500, reads  # the old walk read the 3,000 other keys, and each key's tasks


def test_v1_l1_a_page_of_idle_keys_looks_at_a_bounded_number_and_goes_on(client, tenant, database):
    """1,200 keys of the credential's queue that are held (their rows name a holder, one no
    attempt is) come before its one idle key: the first page looks at 1,000 of them, finds
    nothing and ends with a cursor; walking on finds the idle key."""

    from orbit_shell.server.keypages import IDLE_EXAMINED

    submit(client, tenant, None, 201, concurrency_key="zz/idle")
    [queue] = database.query("SELECT id FROM queues WHERE public_id = %s", (tenant.queue_id,))
    keys = [f"busy/{n:05}" for n in range(IDLE_EXAMINED + 200)]
    _finished_keyed_tasks(database, tenant, queue["id"], keys, holder=2**64 - 1)
    mine = limited_credential(database, tenant, "tasks:read")
    first = _list(client, mine, state="idle", limit=50)
    assert first["keys"] == [] and first["next_cursor"], first
    assert _b64("busy/00999") in first["next_cursor"]
    assert _walk(client, mine, state="idle") == ["zz/idle"]


def _finished_keyed_tasks(database, tenant, queue_id: int, keys: list[str], holder=None) -> None:
    """A finished task of each of ``keys`` in the queue and each key's row (naming ``holder``
    as its holder when given: one no attempt is), in bulk: thousands in a second."""
    import secrets

    from orbit_shell.engine import db as engine_db

    conn = engine_db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                "idempotency_key, handler, handler_version, payload_version, payload, "
                "concurrency_key, priority, state, lane, max_attempts, available_at, "
                "created_at, updated_at, finished_at) VALUES (%s, %s, %s, %s, %s, 'h', 'v1', "
                "'v1', '{}', %s, 5, 'SUCCEEDED', NULL, 3, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), "
                "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
                [
                    (secrets.token_hex(16), tenant.namespace_id, tenant.application_id, queue_id)
                    + (f"bulk-{secrets.token_hex(6)}", k)
                    for k in keys
                ],
            )
            cur.executemany(
                "INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, "
                "holder_attempt_id, created_at, updated_at) VALUES (%s, %s, 1, %s, "
                "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
                [(tenant.namespace_id, k, holder) for k in keys],
            )
    finally:
        conn.close()
