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
    assert (store.values["k"], store.writes, store.rejected) == ("b", 2, 1)
