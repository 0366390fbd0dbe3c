"""The OpenAPI document states what the validators enforce: for generated strings, a string
the document's schema allows is one the server's check accepts, and the other way round.
A schema fuzzer found eight operations where a request valid by the document was refused
(control characters, a cross-field rule, `rule: {}`, an empty `queue_id=`): these compare the
two directly, without a database."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_shell import errors, validation
from orbit_shell.server import openapi, schedules
from orbit_shell.server.resources.tasks import LIST_QUERY

DOC = openapi.build()


def _allowed_by(schema: dict, value: str) -> bool:
    return (
        schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 10**9)
        and re.fullmatch(schema["pattern"], value) is not None
    )


def _accepted_by(check, value) -> bool:
    try:
        check("field", value)
    except errors.InvalidArgument:
        return False
    return True


TEXTS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"])
    | st.sampled_from("\x00\x1f\x7f\x85 \t"),
    max_size=12,
)


@pytest.mark.parametrize(
    "check",
    [
        validation.Text(1, 200),
        validation.Text(0, 1000),
        validation.Text(1, 100, trimmed=True),
        validation.Text(1, 255, printable_ascii=True),
        validation.ConcurrencyKey(),
        validation.IdempotencyKey(),
        LIST_QUERY["cursor"],
    ],
    ids=["text", "note", "name", "printable", "concurrency_key", "idempotency_key", "cursor"],
)
@settings(max_examples=300, deadline=None)
@given(value=TEXTS)
def test_the_document_and_the_validator_agree_on_every_string(check, value):
    assert _allowed_by(check.schema, value) == _accepted_by(check, value), repr(value)


def test_the_reported_mismatches_are_gone():
    body = DOC["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["application/json"]
    handler = body["schema"]["properties"]["handler"]
    assert not _allowed_by(handler, "job\x01")  # control characters: refused by both
    queue = DOC["paths"]["/v1/queues"]["post"]["requestBody"]["content"]["application/json"]
    assert "nullable" in queue["schema"]["properties"]["max_concurrency"]  # 3.0.3, not 3.1
    assert DOC["openapi"] == "3.0.3"
    assert validation.QUEUE_CREATE.parse(
        {"name": "q", "retry_backoff_seconds": 10, "retry_backoff_max_seconds": 5}
    )  # no rule between two fields that the document cannot state
    params = {p["name"]: p for p in DOC["paths"]["/v1/tasks"]["get"]["parameters"]}
    assert not _allowed_by(params["queue_id"]["schema"], "")  # an empty queue_id= is invalid
    rule = DOC["paths"]["/v1/schedules"]["post"]["requestBody"]["content"]["application/json"]
    variants = rule["schema"]["properties"]["rule"]["oneOf"]
    assert all(v["required"] for v in variants)  # rule: {} matches neither variant
    version = DOC["paths"]["/v1/schedules/{schedule_id}/versions"]["post"]["requestBody"]
    assert (
        version["required"]
        and version["content"]["application/json"]["schema"]["minProperties"] == 1
    )


@settings(max_examples=200, deadline=None)
@given(expr=st.from_regex(schedules.CRON_PATTERN, fullmatch=True))
def test_every_cron_the_document_allows_is_accepted_and_fires(expr):
    rule = schedules.RuleCheck()("rule", {"cron": expr, "timezone": "UTC"})
    assert rule.next_after(dt.datetime(2026, 1, 1)) > dt.datetime(2026, 1, 1)
