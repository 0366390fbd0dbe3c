"""Keys over the API (V1): GET /v1/keys/{concurrency_key} shows who holds a key, with which
token, since when, its READY task and what is parked behind it; byte-exact (K2), scoped by
namespace and queue (SPEC 1), read-only (no unlock, no token reset: K6, K7)."""

from __future__ import annotations

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
    assert (idle["state"], idle["holder"], idle["ready_task_id"]) == ("idle", None, ids[0])
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
        "idle",
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
