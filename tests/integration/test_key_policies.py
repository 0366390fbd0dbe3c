"""P1-P3: key policies give a key a limit of holders, each permit on its own slot with a token
from the key's one counter; changes apply at run time (raised: parked tasks start at once;
lowered: nothing revoked, no slot at or above the new limit granted again)."""

from __future__ import annotations

import secrets
import urllib.parse

import pytest

from tests.helpers import Session, submit


def _policy(client, tenant, expect: int = 201, **body):
    answer = client.simulate_post("/v1/key-policies", json=body, headers=tenant.headers)
    assert answer.status_code == expect, answer.text
    return answer.json["data"] if expect < 300 else answer.json["error"]


def _put(client, tenant, policy_id: str, expect: int = 200, **body):
    answer = client.simulate_put(f"/v1/key-policies/{policy_id}", json=body, headers=tenant.headers)
    assert answer.status_code == expect, answer.text
    return answer.json


def _key(client, tenant, key: str) -> dict:
    path = "/v1/keys/" + urllib.parse.quote(key, safe="")
    answer = client.simulate_get(path, headers=tenant.headers)
    assert answer.status_code == 200, answer.text
    return answer.json["data"]


def _policies(client, tenant) -> list[dict]:
    return client.simulate_get("/v1/key-policies", headers=tenant.headers).json["data"]


def _claim_all(sessions: list[Session]) -> list[dict]:
    return [a for s in sessions for a in s.claim(max=4)]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"limit": 2}, "key"),
        ({"key": "a", "prefix": "b", "limit": 2}, "key"),
        ({"key": "", "limit": 2}, "key"),
        ({"key": "a", "limit": 0}, "limit"),
        ({"key": "a", "limit": 1001}, "limit"),
        ({"key": "a", "limit": "2"}, "limit"),
        ({"key": "a"}, "limit"),
        ({"key": "a ", "limit": 2}, "key"),
        ({"prefix": "p\x07", "limit": 2}, "prefix"),
        ({"prefix": "x" * 192, "limit": 2}, "prefix"),
        ({"key": "a", "limit": 2, "limits": 3}, "limits"),
    ],
)
def test_p1_a_bad_policy_is_a_clear_400_and_changes_nothing(client, tenant, body, field):
    error = _policy(client, tenant, 400, **body)
    assert error["code"] == "INVALID_ARGUMENT"
    assert field in error["message"] or any(d.get("field") == field for d in error["details"])
    assert _policies(client, tenant) == []


def test_p3_policies_are_created_read_changed_and_deleted_in_their_namespace(
    client, tenant, tenant_factory
):
    made = _policy(client, tenant, key="acct/1", limit=3)
    assert (made["key"], made["limit"]) == ("acct/1", 3) and "prefix" not in made
    prefix = _policy(client, tenant, prefix="acct/", limit=2)
    assert [p["policy_id"] for p in _policies(client, tenant)] == [
        made["policy_id"],
        prefix["policy_id"],
    ]
    got = client.simulate_get(f"/v1/key-policies/{made['policy_id']}", headers=tenant.headers)
    assert got.json["data"] == made
    # The same key twice is a conflict; the same text as a prefix is another rule.
    assert _policy(client, tenant, 409, key="acct/1", limit=5)["code"] == "STATE_CONFLICT"
    changed = _put(client, tenant, made["policy_id"], key="acct/1", limit=5)["data"]
    assert changed["limit"] == 5 and changed["created_at"] == made["created_at"]
    # Another namespace sees none of it.
    other = tenant_factory()
    assert _policies(client, other) == []
    for method in ("simulate_get", "simulate_delete"):
        answer = getattr(client, method)(
            f"/v1/key-policies/{made['policy_id']}", headers=other.headers
        )
        assert answer.status_code == 404, answer.text
    assert (
        _put(client, other, made["policy_id"], 404, key="acct/1", limit=1)["error"]["code"]
        == "NOT_FOUND"
    )
    gone = client.simulate_delete(f"/v1/key-policies/{made['policy_id']}", headers=tenant.headers)
    assert gone.json["data"] == {"policy_id": made["policy_id"], "deleted": True}
    assert [p["policy_id"] for p in _policies(client, tenant)] == [prefix["policy_id"]]
    again = client.simulate_delete(f"/v1/key-policies/{made['policy_id']}", headers=tenant.headers)
    assert again.status_code == 404
    for bad in ("nope", "A" * 32, "f" * 300):  # no policy could have these ids
        path = f"/v1/key-policies/{bad}"
        assert client.simulate_delete(path, headers=tenant.headers).status_code == 404
        assert _put(client, tenant, bad, 404, key="acct/1", limit=1)["error"]["code"] == "NOT_FOUND"


def test_p1_the_exact_rule_beats_prefixes_and_the_longest_prefix_wins(client, tenant):
    _policy(client, tenant, prefix="t/", limit=2)
    _policy(client, tenant, prefix="t/long/", limit=3)
    _policy(client, tenant, key="t/long/x", limit=4)
    _policy(client, tenant, prefix="t%", limit=9)  # LIKE's wildcard is a plain character here
    for key, limit in (("t/a", 2), ("t/long/y", 3), ("t/long/x", 4), ("u/a", 1), ("t_x", 1)):
        submit(client, tenant, concurrency_key=key)
        view = _key(client, tenant, key)
        assert view["limit"] == limit, key
        assert (view["policy"] or {}).get("limit", 1) == limit, key


def test_p2_a_key_of_limit_3_admits_three_holders_on_three_slots(client, tenant):
    key = "pool/" + secrets.token_hex(4)
    _policy(client, tenant, key=key, limit=3)
    made = [submit(client, tenant, concurrency_key=key).json["data"]["task_id"] for _ in range(5)]
    sessions = [Session(client, tenant, capacity=4) for _ in range(3)]
    owners: dict[str, Session] = {}
    granted: list[dict] = []
    for _ in range(3):  # one grant of a key per claim: each promotes the next task
        for s in sessions:
            for a in s.claim(max=4):
                owners[a["attempt_id"]] = s
                granted.append(a)
    assert len(granted) == 3
    assert sorted(a["concurrency_slot"] for a in granted) == [0, 1, 2]
    tokens = [int(a["concurrency_token"]) for a in granted]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert [a["task"]["task_id"] for a in granted] == made[:3]  # in order
    view = _key(client, tenant, key)
    assert view["limit"] == 3 and view["state"] == "contended"
    assert [h["concurrency_slot"] for h in view["holders"]] == [0, 1, 2]
    assert view["ready_task_id"] is None and view["parked"]["count"] == 2
    # The fourth waits for a slot; freeing slot 1 gives it slot 1 and a higher token.
    waiting = client.simulate_get(f"/v1/tasks/{made[3]}", headers=tenant.headers).json["data"]
    assert waiting["waiting_for"]["limit"] == 3
    assert waiting["waiting_for"]["holder_slot"] == 0
    [freed] = [a for a in granted if a["concurrency_slot"] == 1]
    owner = owners[freed["attempt_id"]]
    assert owner.start(freed["attempt_id"]).status_code == 200
    assert owner.finish(freed["attempt_id"]).status_code == 200
    [fourth] = _claim_all(sessions)
    assert fourth["task"]["task_id"] == made[3] and fourth["concurrency_slot"] == 1
    assert int(fourth["concurrency_token"]) > max(tokens)
    attempts = client.simulate_get(f"/v1/tasks/{made[3]}/attempts", headers=tenant.headers).json[
        "data"
    ]
    assert attempts[0]["concurrency_slot"] == 1


def test_p1_without_a_policy_a_key_admits_one_holder_on_slot_0(client, tenant):
    key = "one/" + secrets.token_hex(4)
    for _ in range(2):
        submit(client, tenant, concurrency_key=key)
    session = Session(client, tenant)
    [only] = session.claim(max=4)
    assert only["concurrency_slot"] == 0
    assert session.claim(max=4) == []
    view = _key(client, tenant, key)
    assert (view["limit"], view["policy"], len(view["holders"])) == (1, None, 1)
    assert view["holder"] == view["holders"][0]


def test_p3_raising_a_limit_starts_parked_tasks_at_once(client, tenant):
    key = "raise/" + secrets.token_hex(4)
    for _ in range(4):
        submit(client, tenant, concurrency_key=key)
    session = Session(client, tenant, capacity=8)
    assert len(session.claim(max=8)) == 1  # limit 1: one holder, three parked
    policy = _policy(client, tenant, key=key, limit=3)
    assert _key(client, tenant, key)["ready_task_id"] is not None  # no release needed
    second = session.claim(max=8)
    third = session.claim(max=8)
    assert [a["concurrency_slot"] for a in second + third] == [1, 2]
    assert session.claim(max=8) == []  # full at 3
    _put(client, tenant, policy["policy_id"], key=key, limit=4)
    [fourth] = session.claim(max=8)
    assert fourth["concurrency_slot"] == 3


def test_p3_lowering_a_limit_revokes_nothing_and_grants_no_slot_above_it(client, tenant):
    key = "lower/" + secrets.token_hex(4)
    policy = _policy(client, tenant, key=key, limit=3)
    for _ in range(6):
        submit(client, tenant, concurrency_key=key)
    session = Session(client, tenant, capacity=8)
    held = [a for _ in range(3) for a in session.claim(max=8)]
    assert sorted(a["concurrency_slot"] for a in held) == [0, 1, 2]
    _put(client, tenant, policy["policy_id"], key=key, limit=1)
    view = _key(client, tenant, key)
    assert view["limit"] == 1 and len(view["holders"]) == 3  # nobody is revoked
    by_slot = {a["concurrency_slot"]: a for a in held}
    assert session.start(by_slot[0]["attempt_id"]).status_code == 200
    assert session.finish(by_slot[0]["attempt_id"]).status_code == 200
    assert session.claim(max=8) == []  # two holders left, limit 1: full
    for slot in (2, 1):
        session.start(by_slot[slot]["attempt_id"])
        assert session.finish(by_slot[slot]["attempt_id"]).status_code == 200
    [next_one] = session.claim(max=8)
    assert next_one["concurrency_slot"] == 0
    assert session.claim(max=8) == []
    # Deleting the policy keeps limit 1 (no rule).
    client.simulate_delete(f"/v1/key-policies/{policy['policy_id']}", headers=tenant.headers)
    assert _key(client, tenant, key)["limit"] == 1


def test_p3_a_candidate_that_a_lowered_limit_parks_starts_at_the_next_release(client, tenant):
    """A key of limit 2 with one holder has its next task READY; lowered to 1, the claim that
    meets that task parks it, and the holder's release must start it again."""
    key = "parked/" + secrets.token_hex(4)
    policy = _policy(client, tenant, key=key, limit=2)
    tasks = [submit(client, tenant, concurrency_key=key).json["data"]["task_id"] for _ in range(3)]
    session = Session(client, tenant, capacity=8)
    [first] = session.claim(max=1)
    assert first["task"]["task_id"] == tasks[0]
    assert _key(client, tenant, key)["ready_task_id"] == tasks[1]  # room for a second holder
    _put(client, tenant, policy["policy_id"], key=key, limit=1)
    assert session.claim(max=8) == []  # full at limit 1: the candidate is parked, not granted
    assert session.start(first["attempt_id"]).status_code == 200
    assert session.finish(first["attempt_id"]).status_code == 200
    [second] = session.claim(max=8)
    assert (second["task"]["task_id"], second["concurrency_slot"]) == (tasks[1], 0)
    assert session.claim(max=8) == []  # limit 1: the third waits for the second


def test_p3_a_prefix_policy_reaches_existing_keys_and_new_ones(client, tenant):
    prefix = "tenant-" + secrets.token_hex(3) + "/"
    for i in range(3):
        submit(client, tenant, concurrency_key=f"{prefix}{i}")
    _policy(client, tenant, prefix=prefix, limit=2)
    submit(client, tenant, concurrency_key=f"{prefix}new")
    for name in ("0", "1", "2", "new"):
        assert _key(client, tenant, prefix + name)["limit"] == 2
    # A batch makes its new keys with the policy's limit too.
    items = [
        {
            "idempotency_key": secrets.token_hex(6),
            "queue_id": tenant.queue_id,
            "handler": "h",
            "handler_version": "v1",
            "payload_version": "v1",
            "payload": {},
            "concurrency_key": f"{prefix}batch",
        }
        for _ in range(3)
    ]
    answer = client.simulate_post("/v1/tasks/batch", json={"tasks": items}, headers=tenant.headers)
    assert answer.status_code == 200, answer.text
    assert _key(client, tenant, f"{prefix}batch")["limit"] == 2


def test_p3_orbit_admin_key_policy_sets_lists_and_deletes(
    client, tenant, database, monkeypatch, capsys
):
    import json

    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", database.dsn)
    names = ["--application", tenant.application, "--environment", "test"]
    names += ["--namespace", tenant.namespace]
    assert admin(["key-policy", *names, "--prefix", "cli/", "--limit", "2"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["prefix"], made["limit"]) == ("cli/", 2)
    assert admin(["key-policy", *names, "--prefix", "cli/", "--limit", "4"]) == 0  # changed
    assert json.loads(capsys.readouterr().out)["policy_id"] == made["policy_id"]
    submit(client, tenant, concurrency_key="cli/a")
    assert _key(client, tenant, "cli/a")["limit"] == 4
    assert admin(["key-policy", *names]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p["policy_id"], p["limit"]) for p in listed] == [(made["policy_id"], 4)]
    # Refused like the API refuses, nothing changed.
    for bad in (["--key", "a ", "--limit", "2"], ["--key", "a", "--limit", "0"], ["--limit", "2"]):
        assert admin(["key-policy", *names, *bad]) == 1
        assert "INVALID_ARGUMENT" in capsys.readouterr().err
    assert admin(["key-policy", *names, "--key", "nope", "--delete"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
    assert admin(["key-policy", *names, "--prefix", "cli/", "--delete"]) == 0
    capsys.readouterr()
    assert _policies(client, tenant) == [] and _key(client, tenant, "cli/a")["limit"] == 1
