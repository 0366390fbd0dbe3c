"""The failover runner's short mode in the suite (H1-H3): three kill -9s of the primary under
semi-synchronous replication, then the negative control, which must show regressions.
``tests/failover/run --long`` runs twenty and prints the same figures."""

from __future__ import annotations

from tests.failover import runner


def test_h1_h2_h3_tokens_never_regress_and_nothing_acknowledged_is_lost(tmp_path):
    figures = runner.scenario(tmp_path / "semi", 3, control=False, run_seconds=2.0)
    print(figures)
    assert figures["failovers"] == 3 and figures["grants"] > 100
    assert figures["unnamed_promotion_refused"] is True
    assert figures["regressions"] == 0
    assert figures["stale_accepted"] == 0
    assert figures["acknowledged_lost"] == 0
    assert figures["unsettled"] == 0


def test_h1_the_negative_control_makes_the_checker_report_regressions(tmp_path):
    control = runner.scenario(tmp_path / "control", 1, control=True, run_seconds=2.0)
    print(control)
    assert control["regressions"] > 0
