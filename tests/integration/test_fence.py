"""Fencing at the resource (SPEC 6): the SQL store, with concurrent writers."""

from __future__ import annotations

import random
import threading

import pytest

from orbit_shell.sdk.fence import SqlFencedStore, StaleTokenError


@pytest.fixture
def sql_store(server):
    name = "fence_test"
    dsn = server.create_database(name)
    store = SqlFencedStore(dsn, "ns")
    store.ensure_schema()
    yield store
    server.drop_database(name)


def test_sql_store_check_raise_dedupe_write(sql_store):
    assert not sql_store.write("ns", "obj", 3, "op-a", "v3").duplicate
    again = sql_store.write("ns", "obj", 3, "op-a", "v3-again")
    assert again.duplicate and again.value == "v3"
    with pytest.raises(StaleTokenError) as info:
        sql_store.write("ns", "obj", 2, "op-b", "stale")
    assert info.value.highest == 3
    sql_store.write("ns", "obj", 7, "op-c", "v7")
    assert sql_store.state("obj") == {"highest_token": 7, "value": "v7"}
    with pytest.raises(PermissionError):
        sql_store.write("ns2", "obj", 9, "op-d", "x")


def test_sql_store_concurrent_writers_end_on_the_highest_token(sql_store):
    tokens = list(range(1, 161))
    random.shuffle(tokens)
    accepted, rejected = [], []
    lock = threading.Lock()

    def writer(mine):
        for token in mine:
            try:
                sql_store.write("ns", "hot", token, f"op-{token}", f"value-{token}")
                with lock:
                    accepted.append(token)
            except StaleTokenError as exc:
                assert exc.highest > token
                with lock:
                    rejected.append(token)

    threads = [threading.Thread(target=writer, args=(tokens[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) + len(rejected) == len(tokens)
    assert max(accepted) == 160
    # The stored value is the write of the highest token, whatever order they committed in.
    assert sql_store.state("hot") == {"highest_token": 160, "value": "value-160"}
    assert rejected  # shuffled concurrent writers: some arrive after a higher token
