"""Fencing at the resource (SPEC 6): the in-memory model, no database."""

from __future__ import annotations

import pytest

from orbit_shell.sdk.fence import InMemoryFencedStore, StaleTokenError


def test_in_memory_store_rejects_stale_tokens_and_deduplicates():
    store = InMemoryFencedStore("ns")
    assert not store.write("ns", "k", 5, "op-1", "a").duplicate
    assert store.write("ns", "k", 5, "op-1", "a").duplicate  # same operation again
    with pytest.raises(StaleTokenError):
        store.write("ns", "k", 4, "op-2", "late")
    store.write("ns", "k", 6, "op-3", "b")
    with pytest.raises(PermissionError):
        store.write("other", "k", 9, "op-4", "x")
    assert (store.values["k", 0], store.writes, store.rejected) == ("b", 2, 1)


def test_p2_each_slot_of_a_key_is_fenced_alone():
    """Slot 1's holder writes with token 3 after slot 0's holder wrote with 4: both are valid
    permits of a key of limit 2, so neither is stale; within a slot a lower token is."""
    store = InMemoryFencedStore("ns")
    store.write("ns", "pool", 4, "op-a", "zero", slot=0)
    store.write("ns", "pool", 3, "op-b", "one", slot=1)
    with pytest.raises(StaleTokenError):
        store.write("ns", "pool", 2, "op-c", "late", slot=1)
    assert (store.highest("pool", 0), store.highest("pool", 1)) == (4, 3)
    with pytest.raises(ValueError, match="slot"):
        store.write("ns", "pool", 5, "op-d", "x", slot=-1)
