"""Fencing at the resource (SPEC 6): the SQL store, with concurrent writers."""

from __future__ import annotations

import random
import threading

import pytest

from orbit_shell.engine import db as dbmod
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


def test_p2_the_sql_store_fences_each_slot_alone(sql_store):
    sql_store.write("ns", "pool", 4, "op-a", "zero", slot=0)
    sql_store.write("ns", "pool", 3, "op-b", "one", slot=1)  # another valid permit: not stale
    with pytest.raises(StaleTokenError):
        sql_store.write("ns", "pool", 2, "op-c", "late", slot=1)
    assert sql_store.state("pool", 1) == {"highest_token": 3, "value": "one"}
    assert sql_store.state("pool") == {"highest_token": 4, "value": "zero"}


def test_p2_tables_made_before_slots_gain_them_and_keep_their_rows(server):
    """A resource database whose fence tables an SDK before slots made: ensure_schema adds the
    slot to both (each row slot 0) and the store goes on fencing them."""
    dsn = server.create_database("fence_old")
    try:
        conn = dbmod.connect(dsn)
        with conn.cursor() as cur:
            cur.execute(
                "CREATE TABLE fence_resources (namespace VARCHAR(100) NOT NULL, resource_key "
                "VARCHAR(191) NOT NULL, highest_token BIGINT UNSIGNED NOT NULL, value MEDIUMTEXT "
                "NULL, PRIMARY KEY (namespace, resource_key)) ENGINE=InnoDB"
            )
            cur.execute(
                "CREATE TABLE fence_operations (seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT "
                "UNIQUE, namespace VARCHAR(100) NOT NULL, resource_key VARCHAR(191) NOT NULL, "
                "operation_id VARCHAR(191) NOT NULL, token BIGINT UNSIGNED NOT NULL, value "
                "MEDIUMTEXT NULL, PRIMARY KEY (namespace, resource_key, operation_id)) "
                "ENGINE=InnoDB"
            )
            cur.execute("INSERT INTO fence_resources VALUES ('ns', 'obj', 9, 'old')")
        conn.close()
        store = SqlFencedStore(dsn, "ns")
        store.ensure_schema()
        store.ensure_schema()  # twice: nothing left to add
        assert store.state("obj") == {"highest_token": 9, "value": "old"}
        with pytest.raises(StaleTokenError):
            store.write("ns", "obj", 8, "op-late", "late")
        store.write("ns", "obj", 5, "op-s1", "slot one", slot=1)
        assert store.state("obj", 1) == {"highest_token": 5, "value": "slot one"}
    finally:
        server.drop_database("fence_old")
