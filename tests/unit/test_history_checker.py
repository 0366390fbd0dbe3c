"""The history checker itself must catch what it claims to catch."""

from __future__ import annotations

import math

import pytest

from tests.history import Grant, History, Write


def ok_history() -> History:
    h = History(
        submitted={"t1", "t2"},
        final_states={"t1": "SUCCEEDED", "t2": "NEEDS_REVIEW"},
        successes={"t1": 1},
    )
    h.grants = [Grant("k", 1, "a1", "t2", 0.0, 1.0), Grant("k", 2, "a2", "t1", 1.0, 2.0)]
    h.writes = [Write("k", 1, 1, True), Write("k", 2, 2, True), Write("k", 1, 3, False)]
    return h


def test_a_clean_history_passes_with_figures():
    figures = ok_history().check()
    assert figures == {
        "grants": 2,
        "keys": 1,
        "overlaps": 0,
        "most_holders": 1,
        "writes": 2,
        "stale_rejected": 1,
        "lost": 0,
    }


@pytest.mark.parametrize(
    "break_it",
    [
        lambda h: h.grants.append(Grant("k", 2, "a3", "t1", 3.0, 4.0)),  # token did not grow
        lambda h: h.grants.append(Grant("k", 3, "a3", "t1", 1.5, math.inf)),  # overlaps a2
        lambda h: h.writes.append(Write("k", 1, 4, True)),  # stale write accepted
        lambda h: h.final_states.update({"t9": "SUCCEEDED"}),  # never submitted
        lambda h: h.submitted.add("t3"),  # accepted, never settled: lost
        lambda h: h.successes.update({"t1": 2}),  # succeeded twice
    ],
)
def test_each_violation_is_caught(break_it):
    h = ok_history()
    break_it(h)
    with pytest.raises(AssertionError):
        h.check()


def slotted_history() -> History:
    """A key of limit 3: three permits at once on slots 0-2, tokens from one counter, and a
    fourth on the slot the first freed; writes fenced per slot."""
    h = History(submitted={"t1"}, final_states={"t1": "SUCCEEDED"})
    h.grants = [
        Grant("k", 1, "a1", "t1", 0.0, 2.0, slot=0, limit=3),
        Grant("k", 2, "a2", "t1", 0.5, 3.0, slot=1, limit=3),
        Grant("k", 3, "a3", "t1", 1.0, 3.0, slot=2, limit=3),
        Grant("k", 4, "a4", "t1", 2.0, 4.0, slot=0, limit=3),
    ]
    # Slot 1's token 2 after slot 0's 4 is no stale write: each slot is fenced alone.
    h.writes = [Write("k", 4, 1, True, slot=0), Write("k", 2, 2, True, slot=1)]
    return h


def test_p2_three_holders_of_a_key_of_limit_3_pass():
    assert slotted_history().check()["most_holders"] == 3


@pytest.mark.parametrize(
    "break_it",
    [
        # Slot 1 granted again while a2 holds it.
        lambda h: h.grants.append(Grant("k", 5, "a5", "t1", 2.5, 5.0, slot=1, limit=3)),
        # A fourth holder at once, on a slot of its own.
        lambda h: h.grants.append(Grant("k", 5, "a5", "t1", 2.5, 5.0, slot=3, limit=3)),
        # Granted after the limit was lowered to 1 while slots 1 and 2 still held.
        lambda h: h.grants.append(Grant("k", 5, "a5", "t1", 2.5, 5.0, slot=3, limit=1)),
        # A stale write within slot 0.
        lambda h: h.writes.append(Write("k", 1, 3, True, slot=0)),
    ],
)
def test_p2_each_slot_violation_is_caught(break_it):
    h = slotted_history()
    break_it(h)
    with pytest.raises(AssertionError):
        h.check()


def test_p2_workers_may_start_holders_of_other_slots_out_of_token_order():
    """On a worker's clock, slot 1's holder (token 3) may begin before slot 0's (token 2):
    both hold valid permits at once. Only the server's grant instants are in token order."""
    h = History(starts_are_grants=False)
    h.grants = [
        Grant("k", 2, "a2", "", 1.0, 3.0, slot=0, limit=2),
        Grant("k", 3, "a3", "", 0.5, 2.0, slot=1, limit=2),
    ]
    assert h.check()["most_holders"] == 2
    h.starts_are_grants = True
    with pytest.raises(AssertionError, match="grant order"):
        h.check()
    # Within a slot the order still holds on any clock.
    h = History(starts_are_grants=False)
    h.grants = [
        Grant("k", 3, "a3", "", 0.0, 1.0, slot=0, limit=2),
        Grant("k", 2, "a2", "", 1.5, 2.0, slot=0, limit=2),
    ]
    with pytest.raises(AssertionError, match="slot 0"):
        h.check()
