"""The claim's bounded long poll on a fake clock: probes instead of fetches while nothing is
there, fetches as soon as a probe says yes, never busy-loops on a probe whose fetch comes back
empty, ends at wait_ms."""

from __future__ import annotations

import pytest

from orbit_shell import errors
from orbit_shell.engine import longpoll


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def test_without_a_probe_the_pauses_double_up_to_a_quarter_second():
    clock, fetched = Clock(), []
    out = longpoll.poll(lambda: fetched.append(clock.now) or [], 1000, clock.sleep, clock)
    assert out == []
    assert [round(t, 2) for t in fetched[:6]] == [0.0, 0.02, 0.06, 0.14, 0.3, 0.55]
    assert round(fetched[-1], 2) == 1.0


def test_work_is_fetched_at_the_first_probe_that_sees_it():
    clock, fetched = Clock(), []

    def fetch():
        fetched.append(clock.now)
        return ["task"] if clock.now >= 0.5 else []

    out = longpoll.poll(fetch, 2000, clock.sleep, clock, ready=lambda: clock.now >= 0.5)
    assert out == ["task"]
    # Without the probe the fetch after 0.5 s would come at 0.55 (then 0.8); with it, at the
    # probe that first sees the task, at most one probe pause late.
    assert 0.5 <= fetched[-1] <= 0.5 + longpoll.PROBE_PAUSE_MAX + 1e-9
    assert len(fetched) == 2  # the first fetch, and the one the probe asked for


def test_a_probe_that_says_yes_while_the_fetch_finds_nothing_is_not_a_busy_loop():
    clock, fetched = Clock(), []
    out = longpoll.poll(
        lambda: fetched.append(clock.now) or [], 1000, clock.sleep, clock, ready=lambda: True
    )
    assert out == []
    # Each yes whose fetch finds nothing is followed by the backoff of a poll without a probe.
    assert len(fetched) <= 10, fetched  # as many as without a probe (below): 8


def test_an_idle_wait_costs_one_fetch_and_probes_that_slow_down():
    clock, fetched, probes = Clock(), [], []

    def ready():
        probes.append(clock.now)
        return False

    out = longpoll.poll(lambda: fetched.append(clock.now) or [], 2000, clock.sleep, clock, ready)
    assert out == [] and fetched == [0.0]
    assert round(clock.now, 2) == 2.0
    gaps = [round(b - a, 3) for a, b in zip(probes, probes[1:], strict=False)]
    assert gaps[:2] == [longpoll.PROBE_PAUSE] * 2
    assert max(gaps) <= longpoll.PROBE_PAUSE_MAX
    # 2 s idle: ~43 probes (0.2 ms of server CPU each, bench/README.md) where polling without
    # a probe makes 12 claims (0.78 ms each): the same cost, for 50 ms of pickup latency at most.
    assert len(probes) <= 45, len(probes)


def test_a_poll_whose_client_is_gone_ends_at_its_next_pause():
    clock, fetched = Clock(), []
    out = longpoll.poll(
        lambda: fetched.append(clock.now) or [],
        30000,
        clock.sleep,
        clock,
        ready=lambda: False,
        gone=lambda: clock.now >= 1.0,
    )
    assert out == [] and fetched == [0.0]
    assert clock.now < 1.1  # not the whole 30 s wait


def test_many_waiting_polls_probe_within_the_budget_together():
    clock, probes = Clock(), []
    gate = longpoll.PollGate(per_credential=1000, total=1000)
    gate._count = 50  # fifty polls waiting in this process
    longpoll.poll(
        lambda: [],
        10000,
        clock.sleep,
        clock,
        ready=lambda: probes.append(clock.now) or False,
        crowd_pause=gate.crowd_pause,
    )
    # 50 polls probing every 0.5 s make the process's 100 probes a second.
    assert len(probes) == 20


def test_the_poll_gate_bounds_a_credential_and_the_process_and_frees_places():
    gate = longpoll.PollGate(per_credential=4, total=6, processes=2)  # 2 and 3 per process
    with gate.admit(1), gate.admit(1):
        with pytest.raises(errors.QuotaExceeded) as info:
            with gate.admit(1):
                pass
        assert info.value.retry_after == 1 and "credential" in info.value.message
        with gate.admit(2):
            with pytest.raises(errors.QuotaExceeded):  # the process's three are held
                with gate.admit(3):
                    pass
    with gate.admit(1), gate.admit(1):  # both places back
        pass
    assert gate._count == 0 and gate._held == {}
