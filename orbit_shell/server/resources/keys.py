"""Keys (V1): who holds a concurrency key, with which token, and what waits for it.

Read-only: there is no manual unlock and no token reset (K6, K7). A key never used in the
namespace is 404. For a credential limited to some queues, tasks of other queues are left
out (their ids are null, their parked tasks are not counted) and a key none of whose tasks it
can see is 404 (SPEC 1); the list leaves such keys out.
"""

from __future__ import annotations

import falcon

from orbit_shell import validation
from orbit_shell.engine import serialize
from orbit_shell.server import keypages
from orbit_shell.server.common import ok, read_query, scope
from orbit_shell.server.scoped import MAX_PAGE

# GET /v1/keys: its query parameters and their checks (the OpenAPI document's too).
LIST_QUERY: dict[str, validation.Check] = {
    "state": validation.Enum(keypages.STATES),
    "prefix": validation.Text(1, validation.MAX_KEY_CHARS),
    "cursor": validation.Pattern(keypages.CURSOR_PATTERN, "is not a cursor returned by this API"),
    "limit": validation.QueryInteger(1, MAX_PAGE),
}


class Keys:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Held and contended keys, longest wait first; ``state=idle`` pages idle keys
        (nothing waits for them) in the order of their first use, or in byte order for a
        credential limited to some queues (read from its own queues' tasks alone)."""
        s = scope(req, "tasks:read")
        query = read_query(req, LIST_QUERY)
        pages = keypages.KeyPages(s, query.get("prefix"))
        keys, cursor = pages.page(query.get("state"), query.get("cursor"), query.get("limit", 20))
        ok(req, resp, {"keys": [serialize.key(k) for k in keys], "next_cursor": cursor})

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, concurrency_key: str):
        s = scope(req, "tasks:read")
        ok(req, resp, serialize.key(s.key(concurrency_key)))
