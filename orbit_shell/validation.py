"""Request parsing and field rules. K2 (concurrency key validation) lives here, once.

Each validator is a small object that checks one value and knows its JSON-schema fragment, so
the OpenAPI document (``server/openapi.py``) is built from the same objects that validate.
Objects are parsed strictly: unknown fields, wrong types and out-of-range values are
``INVALID_ARGUMENT`` with a ``details`` entry naming the field.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orbit_shell.errors import InvalidArgument, field_error
from orbit_shell.jsontext import MAX_JSON_DEPTH

MISSING: Any = object()
HEX32 = re.compile(r"^[0-9a-f]{32}$")
MAX_KEY_CHARS = 191
# JSON-schema patterns of the text rules below, so the OpenAPI document says what they refuse:
# control characters (Unicode category Cc), and for printable ASCII anything outside it.
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
# ... and, for names and keys, whitespace at either end (empty allowed; a length says if not).
TRIMMED = r"^(?:[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?)?$"
PRINTABLE_ASCII = r"^[\x20-\x7e]*$"


# The deepest result or error a worker may report: a batch carries it three levels down
# ({"results": [{"result": ...}]}).
MAX_RESULT_DEPTH = MAX_JSON_DEPTH - 3
# L2: a request body, at most (413 beyond). A result's JSON may be what a report of it alone
# carries beside its item's other fields; an error's message is cut to MAX_ERROR_CHARS.
MAX_BODY_BYTES = 1024 * 1024
MAX_RESULT_BYTES = MAX_BODY_BYTES - 8 * 1024
MAX_ERROR_CHARS = 8 * 1024


def validate_concurrency_key(value: Any, name: str = "concurrency_key") -> str:
    """K2: return the normalised key ('' = no key) or raise INVALID_ARGUMENT.

    Omitted (``MISSING``) and ``""`` mean no key; ``None`` (JSON null) is rejected. A key is 1-191
    Unicode characters of valid UTF-8 (lone surrogates from JSON escapes are rejected), without
    control characters and without leading or trailing Unicode whitespace. The key is returned
    unchanged: matching is exact on UTF-8 bytes, with no case folding or normalisation.
    """
    if value is MISSING or value == "":
        return ""
    if value is None:
        raise field_error(
            name, 'must be a string; omit it or send "" for no key (null is not allowed)'
        )
    if not isinstance(value, str):
        raise field_error(name, "must be a string")
    try:
        value.encode("utf-8", "strict")
    except UnicodeEncodeError:
        raise field_error(name, "must be valid UTF-8 (lone surrogates are not allowed)") from None
    if len(value) > MAX_KEY_CHARS:
        raise field_error(name, f"must be at most {MAX_KEY_CHARS} characters")
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise field_error(name, "must not contain control characters")
    refuse_edge_whitespace(name, value)
    return value


def refuse_edge_whitespace(name: str, value: str) -> None:
    """A key's (K2) and a name's rule: no whitespace at either end (``TRIMMED``)."""
    if value and (value[0].isspace() or value[-1].isspace()):
        raise field_error(name, "must not start or end with whitespace")


class Check:
    """A field validator: ``check(name, value) -> value``; ``schema`` is its JSON schema."""

    schema: dict[str, Any] = {}

    def __call__(self, name: str, value: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class Text(Check):
    """A string of ``min_len``-``max_len`` characters. ``trimmed``: no whitespace at either
    end, for names the database compares: its collations pad with spaces, so ``"q "`` would
    be the name ``"q"`` already taken, or a worker identity ``"w1 "`` would resume ``"w1"``'s
    session."""

    min_len: int = 1
    max_len: int = 200
    printable_ascii: bool = False
    trimmed: bool = False

    def __call__(self, name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise field_error(name, "must be a string")
        if not self.min_len <= len(value) <= self.max_len:
            raise field_error(name, f"must be {self.min_len} to {self.max_len} characters")
        try:
            value.encode("utf-8", "strict")
        except UnicodeEncodeError:
            raise field_error(name, "must be valid UTF-8") from None
        if self.printable_ascii and not all(0x20 <= ord(c) <= 0x7E for c in value):
            raise field_error(name, "must be printable ASCII")
        if not self.printable_ascii and any(unicodedata.category(c) == "Cc" for c in value):
            raise field_error(name, "must not contain control characters")
        if self.trimmed:
            refuse_edge_whitespace(name, value)
        return value

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "type": "string",
            "minLength": self.min_len,
            "maxLength": self.max_len,
            "pattern": (
                PRINTABLE_ASCII if self.printable_ascii else TRIMMED if self.trimmed else NO_CONTROL
            ),
        }


@dataclass
class Integer(Check):
    minimum: int
    maximum: int
    nullable: bool = False

    def __call__(self, name: str, value: Any) -> int | None:
        if value is None and self.nullable:
            return None
        # bool is an int subclass in Python; JSON true is not a number.
        if isinstance(value, bool) or not isinstance(value, int):
            raise field_error(name, "must be an integer" + (" or null" if self.nullable else ""))
        if not self.minimum <= value <= self.maximum:
            raise field_error(name, f"must be between {self.minimum} and {self.maximum}")
        return value

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        out: dict[str, Any] = {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}
        if self.nullable:
            out["nullable"] = True  # OpenAPI 3.0's form; the document is 3.0.3
        return out


class Boolean(Check):
    schema = {"type": "boolean"}

    def __call__(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise field_error(name, "must be true or false")
        return value


@dataclass
class Enum(Check):
    values: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> str:
        if value not in self.values:
            raise field_error(name, "must be one of " + ", ".join(self.values))
        return value

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return {"type": "string", "enum": list(self.values)}


@dataclass
class Hex32(Check):
    nullable: bool = False

    def __call__(self, name: str, value: Any) -> str | None:
        if value is None and self.nullable:
            return None
        if not isinstance(value, str) or not HEX32.match(value):
            wanted = "32 lowercase hexadecimal characters" + (" or null" if self.nullable else "")
            raise field_error(name, "must be " + wanted)
        return value

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        out: dict[str, Any] = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
        if self.nullable:
            out["nullable"] = True
        return out


class AnyJson(Check):
    """Any JSON value (including null): no lone surrogates, no NaN or infinities (a value a
    Python caller built, as the direct worker transport takes them; a body's are refused by
    parse_json)."""

    schema: dict[str, Any] = {}

    def __call__(self, name: str, value: Any) -> Any:
        try:
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", "strict")
        except UnicodeEncodeError:
            raise field_error(
                name, "must be valid UTF-8 (lone surrogates are not allowed)"
            ) from None
        except ValueError:
            raise field_error(
                name, "must be JSON: NaN, Infinity and -Infinity are not JSON numbers"
            ) from None
        return value


@dataclass
class ListOf(Check):
    item: Check
    min_items: int = 1
    max_items: int = 100

    def __call__(self, name: str, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise field_error(name, "must be a list")
        if not self.min_items <= len(value) <= self.max_items:
            raise field_error(name, f"must have {self.min_items} to {self.max_items} items")
        return [self.item(f"{name}[{i}]", v) for i, v in enumerate(value)]

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "type": "array",
            "items": self.item.schema,
            "minItems": self.min_items,
            "maxItems": self.max_items,
        }


@dataclass
class Object(Check):
    """A nested JSON object of a known shape (items of a batch)."""

    shape: Shape

    def __call__(self, name: str, value: Any) -> dict[str, Any]:
        try:
            return self.shape.parse(value)
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"{name}: {exc.message}",
                [{**d, "field": f"{name}.{d['field']}"} if "field" in d else d for d in exc.details]
                or [{"field": name, "message": exc.message}],
            ) from None

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return self.shape.schema


class ConcurrencyKey(Check):
    schema = {
        "type": "string",
        "maxLength": MAX_KEY_CHARS,
        # K2: empty, or no control character anywhere and no whitespace at either end.
        "pattern": TRIMMED,
        "description": 'K2: omitted or "" = no key; 1-191 characters, exact bytes',
    }

    def __call__(self, name: str, value: Any) -> str:
        return validate_concurrency_key(value, name)


class KeyText(Check):
    """A key or a key prefix a key policy names (P1): K2's rules, and never empty."""

    schema = {**ConcurrencyKey.schema, "minLength": 1, "description": "K2: 1-191 characters"}

    def __call__(self, name: str, value: Any) -> str:
        if value == "":
            raise field_error(name, "must not be empty")
        return validate_concurrency_key(value, name)


@dataclass
class QueryInteger(Check):
    """An integer sent as a query string's decimal digits."""

    minimum: int
    maximum: int

    def __call__(self, name: str, value: Any) -> int:
        if not isinstance(value, str) or not value.isascii() or not value.isdigit():
            raise field_error(name, "must be an integer")
        return Integer(self.minimum, self.maximum)(name, int(value))

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return Integer(self.minimum, self.maximum).schema


@dataclass
class Pattern(Check):
    """A string matching ``pattern`` whole."""

    pattern: str
    message: str

    def __call__(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value):
            raise field_error(name, self.message)
        return value

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return {"type": "string", "pattern": self.pattern}


@dataclass
class Field:
    check: Check
    required: bool = False
    default: Any = MISSING


@dataclass
class Shape:
    """A strict JSON object shape: named fields, nothing else."""

    fields: dict[str, Field]
    post: Callable[[dict[str, Any]], None] | None = field(default=None)
    min_fields: int = 0  # at least this many of the fields must be given
    one_of: tuple[str, ...] = ()  # exactly one of these fields must be given

    def parse(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise InvalidArgument("request body must be a JSON object")
        unknown = sorted(set(body) - set(self.fields))
        if unknown:
            raise InvalidArgument(
                "unknown field(s): " + ", ".join(unknown),
                [{"field": name, "message": "unknown field"} for name in unknown],
            )
        if len(body) < self.min_fields:
            names = ", ".join(self.fields)
            raise InvalidArgument(f"give at least {self.min_fields} of: {names}")
        if self.one_of and sum(name in body for name in self.one_of) != 1:
            names = " and ".join(f'"{name}"' for name in self.one_of)
            raise InvalidArgument(
                f"give exactly one of {names}",
                [{"field": name, "message": "give exactly one"} for name in self.one_of],
            )
        out: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if name in body:
                out[name] = spec.check(name, body[name])
            elif spec.required:
                raise field_error(name, "is required")
            elif spec.default is not MISSING:
                out[name] = spec.default
        if self.post:
            self.post(out)
        return out

    @property
    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "additionalProperties": False}
        required = [n for n, f in self.fields.items() if f.required]
        if required:  # OpenAPI 3.0 wants at least one name, or no "required" at all
            out["required"] = required
        out["properties"] = {n: f.check.schema for n, f in self.fields.items()}
        if self.min_fields:
            out["minProperties"] = self.min_fields
        if self.one_of:
            out["oneOf"] = [{"required": [name]} for name in self.one_of]
        return out


# Shapes of the request bodies -------------------------------------------------------------


QUEUE_CREATE = Shape(
    {
        "name": Field(Text(1, 100, trimmed=True), required=True),
        "max_concurrency": Field(Integer(1, 1_000_000, nullable=True), default=None),
        "max_unfinished": Field(Integer(1, 1_000_000_000, nullable=True), default=None),
        "max_attempts": Field(Integer(1, 100), default=3),
        "lease_seconds": Field(Integer(1, 3600), default=30),
        "retry_backoff_seconds": Field(Integer(0, 3600), default=1),
        # The cap of every retry's delay, the first included: a cap below the base makes
        # every delay the cap (min(cap, base x 2^(n-1)), with jitter).
        "retry_backoff_max_seconds": Field(Integer(0, 86400), default=300),
    },
)


TASK_RESOLVE = Shape(
    {
        "state": Field(Enum(("SUCCEEDED", "FAILED", "WAITING")), required=True),
        "note": Field(Text(0, 1000), default=None),
    }
)
EMPTY = Shape({})


class IdempotencyKey(Check):
    """1-255 printable ASCII, no space at either end; the prefix ``schedule:`` is reserved for
    schedule fires. A header's value cannot start or end with a space (HTTP drops them), and
    the database compares keys padded with spaces: a batch item's ``"k "`` would have been
    the key ``"k"``, replayed or refused as a conflict."""

    schema = {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": r"^(?!schedule:)[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$",
    }

    def __call__(self, name: str, value: Any) -> str:
        if isinstance(value, str) and value.startswith("schedule:"):
            raise field_error(name, "the prefix schedule: is reserved for schedule fires")
        value = Text(1, 255, printable_ascii=True)(name, value)
        if value[0] == " " or value[-1] == " ":
            raise field_error(name, "must not start or end with a space")
        return value


def idempotency_key(header: str | None) -> str:
    """Validate the ``Idempotency-Key`` header (required; 1-255 printable ASCII, no space at
    either end)."""
    if header is None:
        raise field_error("Idempotency-Key", "header is required")
    return IdempotencyKey()("Idempotency-Key", header)


# Batch routes: at most BATCH_MAX items, each with the semantics, idempotency and errors of the
# single route. A malformed item rejects the whole request (400, nothing done).
BATCH_MAX = 100
