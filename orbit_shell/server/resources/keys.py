"""Keys (V1): who holds a concurrency key, with which token, and what waits for it.

Read-only: there is no manual unlock and no token reset (K6, K7). A key never used in the
namespace is 404. For a credential limited to some queues, tasks of other queues are left
out (their ids are null, their parked tasks are not counted) and a key none of whose tasks it
can see is 404 (SPEC 1).
"""

from __future__ import annotations

import falcon

from orbit_shell.engine import serialize
from orbit_shell.server.common import ok, scope


class Keys:
    def on_get_item(self, req: falcon.Request, resp: falcon.Response, concurrency_key: str):
        s = scope(req, "tasks:read")
        ok(req, resp, serialize.key(s.key(concurrency_key)))
