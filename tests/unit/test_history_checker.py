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
