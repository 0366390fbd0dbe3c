"""Model-based test: random sequences of submit, claim, start, renew, result,
cancel, resolve and time passing (lease expiry + sweep) against the real procedures, single
and batched (task_submit_many, attempt_result_many), with the engine's invariants checked
after every step."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from orbit_shell import errors
from tests.conftest import make_tenant
from tests.engine import Engine, queue_counts, submit_item, sweep

KEYS = ["", "m/a", "m/b"]
OUTCOMES = [("succeeded", 0), ("failed", 1), ("failed", 0), ("unknown", 0)]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "DEADLINE_EXCEEDED"}


def machine(database, tmp_path):
    class EngineModel(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.eng = Engine(database, make_tenant(database, tmp_path))
            # Quotas far above what the model reaches: the application then keeps its
            # counters, which the invariant checks against the rows (the queue counts its own
            # when read: it has no limit).
            database.call("application_set_quota", self.eng.t.application, 10**6, 10**6)
            self.sessions = [self.eng.hello(capacity=2)[0] for _ in range(2)]
            self.attempts: list[tuple[str, str]] = []  # (session, attempt id)
            self.tasks: list[str] = []
            self.tokens: dict[str, int] = {}

        def _q(self, sql, *args):
            return database.query(sql, (self.eng.t.namespace_id, *args))

        @rule(key=st.sampled_from(KEYS))
        def submit(self, key):
            self.tasks.append(self.eng.submit(key))

        @rule(i=st.integers(0, 1), n=st.integers(1, 3))
        def claim(self, i, n):
            for row in self.eng.claim(self.sessions[i], n):
                self.attempts.append((self.sessions[i], row["attempt_id"]))
                if row["concurrency_key"]:
                    previous = self.tokens.get(row["concurrency_key"], 0)
                    assert row["concurrency_token"] > previous  # K7: tokens only grow
                    self.tokens[row["concurrency_key"]] = row["concurrency_token"]

        @rule(data=st.data(), action=st.sampled_from(["start", "renew"]))
        def start_or_renew(self, data, action):
            if self.attempts:
                session, attempt = data.draw(st.sampled_from(self.attempts))
                try:
                    getattr(self.eng, action)(session, attempt)
                except (errors.LeaseLost, errors.StateConflict):
                    pass

        @rule(data=st.data(), outcome=st.sampled_from(OUTCOMES))
        def result(self, data, outcome):
            if self.attempts:
                session, attempt = data.draw(st.sampled_from(self.attempts))
                try:
                    self.eng.result(session, attempt, *outcome)
                except (errors.LeaseLost, errors.StateConflict):
                    pass

        @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
        def submit_batch(self, keys):
            """task_submit_many, a key possibly named by several items (set-based)."""
            [queue] = database.query(
                "SELECT id FROM queues WHERE public_id = %s", (self.eng.queue,)
            )
            items = [submit_item(queue["id"], key) for key in keys]
            [answers] = database.call(
                "task_submit_many", self.eng.t.namespace_id, "model", json.dumps(items)
            )
            assert [a["item_error"] for a in answers] == [None] * len(keys)
            self.tasks += [a["task_id"] for a in answers]

        @rule(data=st.data(), i=st.integers(0, 1), start_first=st.booleans())
        def result_batch(self, data, i, start_first):
            """attempt_result_many of one session's attempts, an attempt possibly twice, each
            with its own outcome (succeeded and failed set-based, the rest item by item); the
            attempts started first or not, as a worker's start and report would."""
            mine = [a for s, a in self.attempts if s == self.sessions[i]]
            if mine:
                picked = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=4))
                for attempt in picked if start_first else ():
                    try:
                        self.eng.start(self.sessions[i], attempt)
                    except (errors.LeaseLost, errors.StateConflict):
                        pass
                items = [
                    {"attempt_id": a, "outcome": outcome, "retryable": retryable}
                    | {"result": "", "error": ""}
                    for a, (outcome, retryable) in zip(
                        picked,
                        data.draw(st.lists(st.sampled_from(OUTCOMES), min_size=4, max_size=4)),
                        strict=False,
                    )
                ]
                [answers] = database.call(
                    "attempt_result_many",
                    self.eng.t.namespace_id,
                    self.sessions[i],
                    json.dumps(items),
                )
                codes = {(a["item_error"] or "").split(":")[0] for a in answers}
                assert codes <= {"", "LEASE_LOST", "STATE_CONFLICT"}, answers

        @rule(
            i=st.integers(0, 1),
            outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=3, max_size=3),
        )
        def worker_round(self, i, outcomes):
            """A worker's round: claim, start, and report what it got in one batch."""
            session = self.sessions[i]
            granted = [row["attempt_id"] for row in self.eng.claim(session, 3)]
            self.attempts += [(session, a) for a in granted]
            for attempt in granted:
                self.eng.start(session, attempt)
            if granted:
                items = [
                    {"attempt_id": a, "outcome": o, "retryable": r, "result": "", "error": ""}
                    for a, (o, r) in zip(granted, outcomes, strict=False)
                ]
                [answers] = database.call(
                    "attempt_result_many", self.eng.t.namespace_id, session, json.dumps(items)
                )
                assert [a["item_error"] for a in answers] == [None] * len(items), answers

        @rule(data=st.data())
        def cancel(self, data):
            if self.tasks:
                try:
                    database.call(
                        "task_cancel",
                        self.eng.t.namespace_id,
                        data.draw(st.sampled_from(self.tasks)),
                        "model",
                    )
                except errors.StateConflict:
                    pass

        @rule(data=st.data(), to=st.sampled_from(["WAITING", "SUCCEEDED", "FAILED"]))
        def resolve(self, data, to):
            if self.tasks:
                try:
                    database.call(
                        "task_resolve",
                        self.eng.t.namespace_id,
                        data.draw(st.sampled_from(self.tasks)),
                        to,
                        "model",
                        None,
                    )
                except errors.StateConflict:
                    pass

        @rule(data=st.data())
        def time_passes(self, data):
            if self.attempts:
                self.eng.expire(data.draw(st.sampled_from(self.attempts))[1])
                sweep(database)

        @invariant()
        def one_holder_per_key(self):
            rows = self._q(
                "SELECT t.concurrency_key, COUNT(*) AS n FROM attempts a JOIN tasks t "
                "ON t.id = a.task_id WHERE a.namespace_id = %s AND t.concurrency_key "
                "<> '' AND a.state IN ('LEASED', 'RUNNING') GROUP BY t.concurrency_key"
            )
            assert all(r["n"] == 1 for r in rows), rows
            for r in self._q(
                "SELECT r.concurrency_key, r.holder_attempt_id, r.candidate_task_id, "
                "(SELECT COUNT(*) FROM tasks t WHERE t.namespace_id = r.namespace_id "
                "AND t.concurrency_key = r.concurrency_key AND t.lane = 'READY') AS "
                "ready FROM concurrency_resources r WHERE r.namespace_id = %s"
            ):
                assert r["ready"] <= 1 and not (r["holder_attempt_id"] and r["ready"]), r
                held = [k for k in rows if k["concurrency_key"] == r["concurrency_key"]]
                assert bool(held) == bool(r["holder_attempt_id"]), r

        @invariant()
        def states_agree_and_counters_match(self):
            for t in self._q(
                "SELECT t.state, t.lane, a.state AS attempt FROM tasks t LEFT JOIN "
                "attempts a ON a.id = t.current_attempt_id WHERE t.namespace_id = %s"
            ):
                assert (t["lane"] is not None) == (t["state"] == "WAITING"), t
                if t["state"] in ("LEASED", "RUNNING"):
                    assert t["attempt"] == t["state"], t
            [q] = self._q("SELECT id FROM queues WHERE namespace_id = %s")
            q = queue_counts(database, q["id"])
            [a] = self._q(
                "SELECT COUNT(*) AS n FROM attempts WHERE namespace_id = %s AND "
                "state IN ('LEASED', 'RUNNING')"
            )
            [u] = self._q(
                "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND state "
                "NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'DEADLINE_EXCEEDED')"
            )
            [app] = self._q(
                "SELECT a.active_attempts, a.unfinished_tasks FROM applications a "
                "JOIN namespaces n ON n.application_id = a.id WHERE n.id = %s"
            )
            assert q["active_attempts"] == a["n"] == app["active_attempts"]
            assert q["unfinished_tasks"] == u["n"] == app["unfinished_tasks"]
            flights = self._q(
                "SELECT s.in_flight, (SELECT COUNT(*) FROM attempts x WHERE "
                "x.session_id = s.id AND x.state IN ('LEASED', 'RUNNING')) AS n "
                "FROM worker_sessions s WHERE s.namespace_id = %s"
            )
            assert all(f["in_flight"] == f["n"] for f in flights), flights

    return EngineModel


@pytest.mark.slow
def test_model_based_invariants(database, tmp_path):
    run_state_machine_as_test(
        machine(database, tmp_path),
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
