"""Tasks: submit (idempotent), read, list, attempts, history, cancel, resolve."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import falcon

from orbit_shell import errors, task_shapes, validation
from orbit_shell.engine import batches, serialize
from orbit_shell.server import actions, auth
from orbit_shell.server.common import in_scope_batch, item, ok, read_json, read_query, scope
from orbit_shell.server.guard import SubmitGuard
from orbit_shell.server.scoped import CURSOR_PATTERN, HISTORY_PAGE, MAX_PAGE
from orbit_shell.server.wakeups import Wakeups

STATES = (
    "WAITING",
    "LEASED",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "CANCELLED",
    "NEEDS_REVIEW",
    "DEADLINE_EXCEEDED",
)


# GET /v1/tasks: its query parameters and their checks (the OpenAPI document's too).
LIST_QUERY: dict[str, validation.Check] = {
    "queue_id": validation.Hex32(),
    "state": validation.Enum(STATES),
    "business_key": validation.Text(0, 191),
    "concurrency_key": validation.ConcurrencyKey(),
    "cursor": validation.Pattern(CURSOR_PATTERN, "is not a cursor returned by this API"),
    "limit": validation.QueryInteger(1, MAX_PAGE),
}
FILTERS = ("queue_id", "state", "business_key", "concurrency_key")
# GET /v1/tasks/{id}/attempts and /history: a page after ``cursor`` (the last attempt number,
# or the position of the last event, read), ``limit`` rows; a next page is linked (Link).
PAGE_QUERY: dict[str, validation.Check] = {
    "cursor": validation.QueryInteger(0, 2**31 - 1),
    "limit": validation.QueryInteger(1, MAX_PAGE),
}


def _paged(req: falcon.Request, resp: falcon.Response, rows: list, limit: int, last) -> list:
    """The page of ``rows`` (read ``limit + 1``), with ``Link: <...>; rel="next"`` when more
    follow; ``last`` gives the cursor of a row."""
    if len(rows) > limit:
        rows = rows[:limit]
        nxt = urlencode({"cursor": last(rows[-1]), "limit": limit})
        resp.set_header("Link", f'<{req.path}?{nxt}>; rel="next"')
    return rows


class Tasks:
    # Queue ids remembered per process, at most this many (then forgotten all at once).
    QUEUE_IDS_MAX = 10_000

    def __init__(self, max_body: int, guard: SubmitGuard, wakeups: Wakeups | None = None) -> None:
        self.max_body = max_body
        self.guard = guard
        self.wakeups = wakeups or Wakeups()
        self.queue_ids: dict[tuple[int, str], int] = {}

    def queue_id(self, s, public_id: str) -> int:
        """The internal id of a queue the credential may submit to; NOT_FOUND outside its
        namespace or queue scope, as Scope.queue. No queue is ever deleted or given another
        id or namespace, so a (namespace, public id) found once names the same row for good:
        each process remembers it, and a submission skips the read (0.35 of 2.3 ms of a
        single one in-process). The queue scope is the credential's, checked on
        every call; an id not found is not remembered (the queue may be created next)."""
        key = (s.namespace_id, public_id)
        found = self.queue_ids.get(key)
        if found is None:
            found = s.queue(public_id)["id"]
            if len(self.queue_ids) >= self.QUEUE_IDS_MAX:
                self.queue_ids.clear()
            self.queue_ids[key] = found
        elif not s.covers_queue(found):
            raise errors.NotFound("queue not found")
        return found

    # POST authenticates in its one database call (task_submit_as), not in the middleware.
    self_authenticating = (("POST", "/v1/tasks"),)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """One round trip: the token is parsed here and checked by task_submit_as with the
        scope and queue scope, in the call that submits. The rate guard is keyed by the
        credential's public id and spent once the call has authenticated it."""
        header = req.get_header("Authorization")
        credential, digest = auth.bearer(header)
        self.guard.check(credential)
        try:
            idem = validation.idempotency_key(req.get_header("Idempotency-Key"))
            body = read_json(req, task_shapes.TASK_SUBMIT, self.max_body)
        except errors.OrbitError:
            # A refused request answers as any route would: who you are and what you may do
            # (401, 403) before what you sent; only this path reads the credential first.
            auth.authenticate(req.context.db, header).require("tasks:submit")
            raise
        row = batches.submit_one(
            req.context.db,
            "task_submit_as",
            credential,
            digest,
            body["queue_id"],
            idem,
            *batches.submit_fields(body),
        )
        self.guard.spend(credential)
        # task_submit answers the detail, as one JSON object (sql/procedures/task_submit.sql).
        task = json.loads(row["task"])
        if row["created"]:
            self.wakeups.notify({task["queue_public_id"]: 1})
        status = falcon.HTTP_201 if row["created"] else falcon.HTTP_200
        ok(req, resp, serialize.task_detail(task), status)

    def on_post_batch(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Submit up to 100 tasks in one transaction, each as POST /v1/tasks would (own
        Idempotency-Key, own error); answers receipts instead of full task details."""
        s = scope(req, "tasks:submit")
        body = read_json(req, task_shapes.TASK_BATCH, self.max_body)
        self.guard.take(s.principal.public_id, len(body["tasks"]))

        def prepare(task: dict) -> tuple[int, str, dict]:
            key = task.pop("idempotency_key")
            return self.queue_id(s, task["queue_id"]), key, task  # NOT_FOUND out of scope

        answers = in_scope_batch(
            body["tasks"],
            prepare,
            lambda chosen: batches.submit_many(s.db, s.namespace_id, s.principal.actor, chosen),
        )
        arrived: dict[str, int] = {}
        for task, answer in zip(body["tasks"], answers, strict=True):
            if isinstance(answer, dict) and answer["created"]:
                arrived[task["queue_id"]] = arrived.get(task["queue_id"], 0) + 1
        self.wakeups.notify(arrived)
        ok(
            req,
            resp,
            {
                "results": [
                    item(a, 201 if isinstance(a, dict) and a["created"] else 200) for a in answers
                ]
            },
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        s = scope(req, "tasks:read")
        query = read_query(req, LIST_QUERY)
        filters = {k: v for k, v in query.items() if k in FILTERS}
        if "queue_id" in filters:
            filters["queue_id"] = s.queue(filters["queue_id"])["id"]
        limit = query.get("limit", 50)
        rows = s.tasks(filters, s.task_position(query.get("cursor")), limit + 1)
        page = rows[:limit]
        cursor = page[-1]["public_id"] if len(rows) > limit else None
        ok(req, resp, {"tasks": [serialize.task_summary(r) for r in page], "next_cursor": cursor})

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        s = scope(req, "tasks:read")
        row = s.task(task_id)
        why = s.waiting(row)
        ok(req, resp, {**serialize.task_detail(row), **serialize.waiting(row, why)})

    def on_get_attempts(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        s = scope(req, "tasks:read")
        query = read_query(req, PAGE_QUERY)
        limit = query.get("limit", HISTORY_PAGE)
        rows = s.attempts(task_id, query.get("cursor", 0), limit + 1)
        rows = _paged(req, resp, rows, limit, lambda r: r["attempt_number"])
        ok(req, resp, [serialize.attempt(r) for r in rows])

    def on_get_attempt(self, req, resp, task_id: str, number: str) -> None:
        s = scope(req, "tasks:read")  # number is digits: checked with every path id in app.py
        ok(req, resp, serialize.attempt(s.attempt(task_id, int(number))))

    def on_get_history(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        s = scope(req, "tasks:read")
        query = read_query(req, PAGE_QUERY)
        limit = query.get("limit", HISTORY_PAGE)
        rows = s.history(task_id, query.get("cursor", 0), limit + 1)
        rows = _paged(req, resp, rows, limit, lambda r: r["position"])
        ok(
            req,
            resp,
            [
                {
                    "event": h["event"],
                    "from_state": h["from_state"],
                    "to_state": h["to_state"],
                    "actor": h["actor"],
                    "details": h["details"],
                    "attempt_id": h["attempt_id"],
                    **(
                        {"concurrency_token": str(h["concurrency_token"])}
                        if h["concurrency_token"]
                        else {}
                    ),
                    "at": serialize.iso(h["created_at"]),
                }
                for h in rows
            ],
        )

    def on_post_cancel(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        s = scope(req, "tasks:manage")
        read_json(req, validation.EMPTY, self.max_body)
        ok(req, resp, _as_read_scope_allows(s, actions.cancel_task(s, task_id)))

    def on_post_resolve(self, req: falcon.Request, resp: falcon.Response, task_id: str) -> None:
        s = scope(req, "tasks:manage")
        body = read_json(req, validation.TASK_RESOLVE, self.max_body)
        row = actions.resolve_task(s, task_id, body["state"], body["note"])
        ok(req, resp, _as_read_scope_allows(s, row))


def _as_read_scope_allows(s, row: dict) -> dict:
    """An action's answer: the task's detail for a credential that may read tasks, its
    summary (no payload, result or error) for one that may only act on them."""
    if "tasks:read" in s.principal.scopes:
        return serialize.task_detail(row)
    return serialize.task_summary(row)
