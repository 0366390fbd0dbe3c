"""W5 protocol checks of the SDK worker and token parsing (K9), without a server."""

from __future__ import annotations

import json

import pytest

from orbit_shell import validation
from orbit_shell.sdk.models import ProtocolError, parse_token
from orbit_shell.sdk.protocol import ProtocolGuard, Retry, outcome_of, report_bytes


def assign(attempt="a" * 32, key="object/42", token="17", slot=0):
    wire = {
        "type": "task.assign",
        "attempt_id": attempt,
        "attempt_number": 1,
        "lease_expires_at": "2026-01-01T00:00:00.000000Z",
        "task": {
            "task_id": "t" * 32,
            "queue_id": "q" * 32,
            "handler": "h",
            "handler_version": "v1",
            "payload_version": "v1",
            "payload": {},
        },
    }
    if key is not None:
        wire["task"]["concurrency_key"] = key
    if token is not None:
        wire["concurrency_token"] = token
    if slot is not None and key is not None:
        wire["concurrency_slot"] = slot
    return wire


def test_w5_accepts_a_well_formed_keyed_assignment_with_an_int_token():
    event = ProtocolGuard(True).check(assign(token="18446744073709551615"))
    assert event.concurrency_token == 18446744073709551615
    assert isinstance(event.concurrency_token, int)
    assert event.task.concurrency_key == "object/42"


def test_w5_keyed_task_without_token_is_refused():
    with pytest.raises(ProtocolError, match="without a token"):
        ProtocolGuard(True).check(assign(token=None))


def test_w5_token_without_key_is_refused():
    with pytest.raises(ProtocolError, match="no key"):
        ProtocolGuard(True).check(assign(key=None))


def test_w5_keyed_task_on_a_session_without_support_is_refused():
    with pytest.raises(ProtocolError, match="without concurrency_keys"):
        ProtocolGuard(False).check(assign())
    ProtocolGuard(False).check(assign(key=None, token=None))  # unkeyed still fine


@pytest.mark.parametrize("change", [{"token": "18"}, {"key": "object/43"}, {"slot": 1}])
def test_w5_redispatch_that_changes_key_token_or_slot_is_refused(change):
    guard = ProtocolGuard(True)
    guard.check(assign())
    guard.check(assign())  # the same re-dispatch (resume) is fine
    with pytest.raises(ProtocolError, match="changed"):
        guard.check(assign(**change))


def test_p2_the_slot_reaches_the_handler_and_a_bad_one_is_refused():
    assert ProtocolGuard(True).check(assign(slot=2)).concurrency_slot == 2
    assert ProtocolGuard(True).check(assign(key=None, token=None)).concurrency_slot is None
    # A server from before key policies sends no slot: its keys admit one holder, slot 0.
    assert ProtocolGuard(True).check(assign(slot=None)).concurrency_slot == 0
    for bad in (-1, 1000, "1", 1.0, True):
        with pytest.raises(ProtocolError, match="slot"):
            ProtocolGuard(True).check(assign(slot=bad))
    unkeyed = assign(key=None, token=None)
    unkeyed["concurrency_slot"] = 0
    with pytest.raises(ProtocolError, match="slot but no key"):
        ProtocolGuard(True).check(unkeyed)


@pytest.mark.parametrize("bad", [17, 17.0, "0", "-1", "1e3", "18446744073709551616", "017", ""])
def test_k9_tokens_are_nonzero_u64_decimal_strings(bad):
    with pytest.raises(ProtocolError):
        parse_token(bad)


def test_l2_a_result_the_server_would_refuse_is_a_final_failure_not_a_report():
    """A handler's result that is not JSON (NaN) or nests too deep would make the server
    refuse the whole report and every outcome in it with this one: the SDK reports it as a
    failure of its own, with a message that says why."""
    event = ProtocolGuard(concurrency_keys=True).check(assign())
    outcome, retryable, result, error, _ = outcome_of(lambda e: {"ratio": float("nan")}, event)
    assert (outcome, retryable, result) == ("failed", False, None)
    assert error["type"] == "ValueError" and "not JSON" in error["message"]
    deep: object = 1
    for _ in range(validation.MAX_RESULT_DEPTH + 1):
        deep = [deep]
    outcome, _, _, error, _ = outcome_of(lambda e: deep, event)
    assert outcome == "failed" and "nests deeper" in error["message"]
    assert outcome_of(lambda e: {"ratio": 0.5}, event)[:4] == (
        "succeeded",
        False,
        {"ratio": 0.5},
        None,
    )


def test_l2_a_result_or_error_too_large_for_a_report_never_reaches_one():
    """A result larger than a report carries fails its own task, saying so; an error message
    is cut to what a report carries, saying how long it was; the largest result that fits is
    reported as it is."""
    event = ProtocolGuard(concurrency_keys=True).check(assign())
    fits = "x" * (validation.MAX_RESULT_BYTES - 2)  # and its two quotes
    reported = outcome_of(lambda e: fits, event)
    assert reported[:4] == ("succeeded", False, fits, None)
    outcome, _, result, error, _ = outcome_of(lambda e: fits + "x", event)
    assert (outcome, result, error["type"]) == ("failed", None, "ValueError")
    assert error["message"] == (
        f"result is {validation.MAX_RESULT_BYTES + 1} bytes of JSON; "
        f"a report carries at most {validation.MAX_RESULT_BYTES}"
    )

    def loud(e):
        raise Retry("r" * (validation.MAX_ERROR_CHARS + 5))

    outcome, retryable, _, error, size = outcome_of(loud, event)
    assert (outcome, retryable, error["type"]) == ("failed", True, "Retry")
    assert error["message"] == (
        "r" * validation.MAX_ERROR_CHARS
        + f" [cut from {validation.MAX_ERROR_CHARS + 5} characters]"
    )
    # Each outcome carries the bytes it adds to a report, from the text it was checked as.
    assert size == report_bytes(None, error) > report_bytes(None, None)
    assert reported.size == report_bytes(json.dumps(fits), None) > validation.MAX_RESULT_BYTES
    assert reported.size < validation.MAX_BODY_BYTES
