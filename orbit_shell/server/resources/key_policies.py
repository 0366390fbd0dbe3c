"""Key policies (P1, P3, P6; ``queues:manage``): how many holders the namespace's keys admit,
and how many permits of each may begin in a window.

A change applies at once to every key it covers: a raised limit starts parked tasks, a lowered
one revokes nothing (slots at or above it are not granted again)."""

from __future__ import annotations

import falcon

from orbit_shell import policy_shapes
from orbit_shell.server import policies
from orbit_shell.server.common import ok, read_json, scope


class KeyPolicies:
    def __init__(self, max_body: int) -> None:
        self.max_body = max_body

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "queues:manage")
        ok(req, resp, [policies.serialize(r) for r in policies.listed(s.db, s.namespace_id)])

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "queues:manage")
        body = read_json(req, policy_shapes.KEY_POLICY, self.max_body)
        args = policy_shapes.write_args(body)
        [[row]] = s.db.call("key_policy_write", s.namespace_id, None, *args, 0)
        ok(req, resp, policies.serialize(row), falcon.HTTP_201)

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, policy_id: str) -> None:
        s = scope(req, "queues:manage")
        ok(req, resp, policies.serialize(policies.one(s.db, s.namespace_id, policy_id)))

    def on_put_item(self, req: falcon.Request, resp: falcon.Response, policy_id: str) -> None:
        s = scope(req, "queues:manage")
        body = read_json(req, policy_shapes.KEY_POLICY, self.max_body)
        args = policy_shapes.write_args(body)
        [[row]] = s.db.call("key_policy_write", s.namespace_id, policies.known(policy_id), *args, 0)
        ok(req, resp, policies.serialize(row))

    def on_delete_item(self, req: falcon.Request, resp: falcon.Response, policy_id: str) -> None:
        s = scope(req, "queues:manage")
        s.db.call(
            "key_policy_write",
            s.namespace_id,
            policies.known(policy_id),
            None,
            None,
            None,
            None,
            None,
            1,
        )
        ok(req, resp, {"policy_id": policy_id, "deleted": True})
