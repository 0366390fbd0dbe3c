"""The claim's bounded long poll on a fake clock: probes instead of fetches while nothing is
there, fetches as soon as a probe says yes, never busy-loops on a probe whose fetch comes back
empty, ends at wait_ms."""

from __future__ import annotations

from orbit_shell import longpoll


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
