"""What every dashboard page is rendered with: the Jinja environment, its filters, and the
rules for text a user wrote (keys, names) and for the way back a form names."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"


# Where a form may send the browser back to: a page's own percent-encoded path, no query, no
# fragment, no "." or ".." segment (a key such as "k/../../queues?x=1#f" must not lead
# elsewhere), ASCII only (a Location header is Latin-1; a decoded "€" failed after the commit).
BACK_RE = re.compile(r"^/ui/([A-Za-z0-9._~%-]+(/[A-Za-z0-9._~%-]+)*)?$")


def back_to(value: str) -> str:
    """The page a form's ``back`` names when it is one of ours, else the overview."""
    if BACK_RE.match(value) and not {".", ".."} & set(value.split("/")):
        return value
    return "/ui/"


def ago(at: dt.datetime | None, now: dt.datetime) -> str:
    if at is None:
        return ""
    seconds = (now - at).total_seconds()
    later, seconds = seconds < 0, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{int(seconds // size)} {unit}"
            break
    else:
        text = f"{int(seconds)} s"
    return f"in {text}" if later else f"{text} ago"


# Characters that change how the text around them reads without showing themselves: format
# characters (bidi overrides and isolates, zero-width spaces and joiners), line and paragraph
# separators, and the fillers that render blank. "user/\u202egnp.exe" read "user/exe.png".
_INVISIBLE = {"Cf", "Zl", "Zp"}
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")


def visible(text: str) -> str:
    """``text`` with every invisible character written out as ``⟨U+XXXX⟩``."""
    if text.isascii():
        return text
    return "".join(
        f"⟨U+{ord(c):04X}⟩" if c in _FILLERS or unicodedata.category(c) in _INVISIBLE else c
        for c in text
    )


def _shown(value: Any) -> Any:
    """Every ``{{ }}`` output: user strings with invisible characters made visible (markup the
    page built itself, such as ``when``'s, is left as it is)."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters["keypath"] = lambda key: quote(key, safe="")
    # A form field's value as typed, so that sending the form again filters by the same text.
    env.filters["verbatim"] = lambda text: Markup.escape(text)
    env.globals["figure"] = _figure
    env.filters["span"] = span
    return env


def _figure(row: dict[str, Any], name: str) -> str:
    """A counted figure of a row (queuecounts): "10,000+" where the count stopped."""
    return f"{row[name]:,}+" if name in row["lower_bounds"] else str(row[name])


def span(seconds: int) -> str:
    """A window as people say it: "7 d", "36 h", "90 min", "0 s" (nothing kept)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
