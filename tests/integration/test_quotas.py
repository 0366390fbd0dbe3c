"""Quotas and permits (K5): the application quota, queue permits, set-quota. Real
procedures on a real MariaDB."""

from __future__ import annotations

U64_MAX = 18446744073709551615


def _quota(orbit_dsn, monkeypatch, application: str, active: int) -> None:
    """The application quota (K5), set the way an operator sets it."""
    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)
    args = ["set-quota", "--application", application, "--max-active-attempts", str(active)]
    assert admin(args) == 0


def test_k5_application_quota_counts_each_attempt_once(eng, database, orbit_dsn, monkeypatch):
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    eng.submit("quota/a")  # keyed: two permit records, counted once by the application
    eng.submit("quota/b")
    eng.submit()
    session, _ = eng.hello(capacity=10)
    granted = eng.claim(session, 10)
    assert len(granted) == 2
    [app] = database.query(
        "SELECT active_attempts FROM applications WHERE id = %s", (eng.t.application_id,)
    )
    assert app["active_attempts"] == 2
    assert eng.claim(session, 10) == []
    eng.start(session, granted[0]["attempt_id"])
    eng.result(session, granted[0]["attempt_id"])
    assert len(eng.claim(session, 10)) == 1


def test_k5_a_claim_cut_short_by_the_quota_grants_its_best_candidates(eng, orbit_dsn, monkeypatch):
    """Fewer grants than candidates (W2 priority): the set-based grant keeps the best ones."""
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    low, high, middle = (eng.submit("", priority=p) for p in (9, 0, 5))
    session, _ = eng.hello(capacity=10)
    assert [a["task_id"] for a in eng.claim(session, 10)] == [high, middle]  # not low


def test_k5_a_claim_that_recovers_a_lease_under_the_quota_grants_in_its_room(
    eng, orbit_dsn, monkeypatch
):
    """A recovery inside the claim frees an application permit: the same claim may use it."""
    _quota(orbit_dsn, monkeypatch, eng.t.application, 2)
    for _ in range(3):
        eng.submit()
    session, _ = eng.hello(capacity=10)
    first, _second = eng.claim(session, 10)
    eng.expire(first["attempt_id"])  # stalled before start: recovered by the next claim
    assert len(eng.claim(session, 10)) == 1


def test_k5_queue_permits_limit_concurrent_attempts(eng):
    queue, _ = eng.queue_create(max_concurrency=1)
    for _ in range(3):
        eng.submit("", queue)
    s1, _ = eng.hello([queue], capacity=5)
    s2, _ = eng.hello([queue], capacity=5)
    [a] = eng.claim(s1, 5)
    assert eng.claim(s2, 5) == []
    eng.start(s1, a["attempt_id"])
    eng.result(s1, a["attempt_id"])
    assert len(eng.claim(s2, 5)) == 1


def test_set_quota_for_an_unknown_application_fails_clearly(orbit_dsn, capsys, monkeypatch):
    from orbit_shell.cli.admin import main as admin

    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)
    assert admin(["set-quota", "--application", "no-such-app"]) == 1
    assert "NOT_FOUND" in capsys.readouterr().err
