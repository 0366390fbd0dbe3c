"""K2 validation table and request-shape rules (no database)."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_shell import errors, jsontext, task_shapes, validation
from orbit_shell.validation import MISSING, validate_concurrency_key

LONE_SURROGATE = json.loads('"a\\ud800b"')

K2_TABLE = [
    # (value, expected key or None for rejection)
    (MISSING, ""),
    ("", ""),
    (None, None),
    (42, None),
    (["a"], None),
    ("object/42", "object/42"),
    ("a" * 191, "a" * 191),
    ("a" * 192, None),
    ("😀" * 191, "😀" * 191),  # characters, not bytes: 764 bytes is fine
    ("😀" * 192, None),
    (LONE_SURROGATE, None),
    ("a\x00b", None),
    ("a\nb", None),
    ("a\x7fb", None),
    (" a", None),
    ("a ", None),
    ("\u3000a", None),  # ideographic space
    ("a\u00a0", None),  # no-break space
    ("a\u2028", None),
    ("a b", "a b"),  # inner whitespace is fine
    ("object/A", "object/A"),
]


@pytest.mark.parametrize(("value", "expected"), K2_TABLE)
def test_k2_table(value, expected):
    if expected is None:
        with pytest.raises(errors.InvalidArgument) as info:
            validate_concurrency_key(value)
        assert info.value.details[0]["field"] == "concurrency_key"
    else:
        assert validate_concurrency_key(value) == expected


def test_k2_no_case_folding_or_normalisation():
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    assert validate_concurrency_key(nfc) == nfc
    assert validate_concurrency_key(nfd) == nfd
    assert validate_concurrency_key("object/A") != validate_concurrency_key("object/a")


@given(st.text(min_size=1, max_size=191))
def test_k2_accepted_keys_are_returned_unchanged(text):
    try:
        key = validate_concurrency_key(text)
    except errors.InvalidArgument:
        bad = (
            any(unicodedata.category(c) in ("Cc", "Cs") for c in text)
            or text[0].isspace()
            or text[-1].isspace()
        )
        assert bad
    else:
        assert key == text
        assert key.encode("utf-8").decode("utf-8") == text


def test_submit_shape_rejects_unknown_fields_and_bad_types():
    base = {
        "queue_id": "a" * 32,
        "handler": "h",
        "handler_version": "v",
        "payload_version": "v",
        "payload": None,
    }
    assert task_shapes.TASK_SUBMIT.parse(base)["priority"] == 5
    for field, value in [
        ("priority", 10),
        ("priority", True),
        ("priority", "1"),
        ("max_attempts", 0),
        ("deadline_seconds", 0),
        ("queue_id", "A" * 32),
        ("handler", ""),
        ("business_key", "x" * 192),
        ("extra", 1),
    ]:
        with pytest.raises(errors.InvalidArgument) as info:
            task_shapes.TASK_SUBMIT.parse({**base, field: value})
        assert info.value.details[0]["field"] == field


def test_idempotency_key_rules():
    assert validation.idempotency_key("update-object-42-operation-001")
    for bad in (None, "", "x" * 256, "caf\u00e9", "a\tb"):
        with pytest.raises(errors.InvalidArgument):
            validation.idempotency_key(bad)
    assert validation.idempotency_key("x" * 255)


def test_fingerprint_ignores_key_order_but_not_values():
    a = jsontext.fingerprint({"a": 1, "b": {"c": 2, "d": 3}})
    assert a == jsontext.fingerprint({"b": {"d": 3, "c": 2}, "a": 1})
    assert a != jsontext.fingerprint({"a": 1, "b": {"c": 2, "d": 4}})


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_l2_nan_and_the_infinities_are_not_json_in_or_out(word):
    """Python's json takes and writes NaN, Infinity and -Infinity; no strict parser reads
    them back, so they are refused as input and never written as canonical JSON (results,
    fingerprints). Stored text written from the database's own rows (a schedule's definition
    kept on update, its tasks when it fires) is written as read: a row stored before the
    refusal must not make its schedule fail."""
    with pytest.raises(jsontext.NotJsonNumber, match=word):
        jsontext.parse_json('{"payload": {"x": [1, WORD]}}'.replace("WORD", word))
    assert jsontext.parse_json('{"x": 1e308, "y": -0.5}') == {"x": 1e308, "y": -0.5}
    value = json.loads(word)  # what a client or handler of Python's would hand over
    with pytest.raises(ValueError):
        jsontext.canonical_json({"x": value})
    with pytest.raises(errors.InvalidArgument, match="must be JSON"):
        validation.AnyJson()("result", {"x": value})
