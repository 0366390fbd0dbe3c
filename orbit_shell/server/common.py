"""Helpers shared by the resource modules: body parsing, the success envelope, the scope."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import falcon
from gunicorn.http.errors import NoMoreData, ParseException

from orbit_shell import errors
from orbit_shell.jsontext import NotJsonNumber, check_json_depth, parse_json
from orbit_shell.server import auth
from orbit_shell.server.scoped import Scope
from orbit_shell.validation import Check, Shape

# WSGI environ key under which the HTTP worker puts a context manager factory that ends a
# body read taking too long with errors.RequestTimeout (server/gevent_worker.py).
BODY_DEADLINE = "orbit.body_deadline"


def read_query(req: falcon.Request, checks: dict[str, Check]) -> dict[str, Any]:
    """A list route's query parameters, each checked; unknown or repeated ones are refused."""
    params = dict(req.params)
    unknown = sorted(set(params) - set(checks))
    if unknown:
        raise errors.InvalidArgument(
            "unknown query parameter(s): " + ", ".join(unknown),
            [{"field": n, "message": "unknown query parameter"} for n in unknown],
        )
    if any(isinstance(v, list) for v in params.values()):
        raise errors.InvalidArgument("query parameters may be given once")
    return {name: checks[name](name, value) for name, value in params.items()}


def read_body(req: falcon.Request, max_bytes: int) -> bytes:
    """The request's body, whole (413 over ``max_bytes``). A body sent in chunks (no
    Content-Length) is read like any other."""
    if req.content_length is not None and req.content_length > max_bytes:
        raise errors.PayloadTooLarge()
    # Falcon's bounded stream reads no further than Content-Length, nothing without one: a
    # chunked body was read as empty, so a submission answered "queue_id: is required" and an
    # action ran as if sent without its fields. gunicorn's input ends a chunked body itself.
    chunked = "chunked" in (req.get_header("Transfer-Encoding") or "").lower()
    stream = req.stream if req.content_length is None and chunked else req.bounded_stream
    # The server's worker bounds how long the body may take (RequestTimeout, 408); an app
    # called in-process reads without a bound.
    deadline = req.env.get(BODY_DEADLINE) or contextlib.nullcontext
    try:
        with deadline():
            raw = stream.read(max_bytes + 1)
    except (ParseException, NoMoreData) as exc:  # a chunk size line "zz", a body cut short
        raise errors.InvalidArgument(f"the request body is malformed: {exc}") from None
    if len(raw) > max_bytes:
        raise errors.PayloadTooLarge()
    return raw


def read_json(req: falcon.Request, shape: Shape, max_bytes: int) -> dict[str, Any]:
    """Parse and validate a JSON body (413 over the limit, 415 not JSON, 400 bad JSON: NaN,
    Infinity and -Infinity too, which are not JSON), sent in chunks or not (``read_body``).

    An empty body is treated as ``{}`` so that action routes can be called without one.
    """
    raw = read_body(req, max_bytes)
    if not raw.strip():
        return shape.parse({})
    media = (req.content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise errors.UnsupportedMediaType()
    check_json_depth(raw)
    try:
        body = parse_json(raw.decode("utf-8"))
    except NotJsonNumber as exc:
        raise errors.InvalidArgument(f"request body is not valid JSON: {exc}") from None
    except ValueError:  # UnicodeDecodeError is one
        raise errors.InvalidArgument("request body is not valid JSON") from None
    return shape.parse(body)


def ok(req: falcon.Request, resp: falcon.Response, data: Any, status: int = 200) -> None:
    """Write the success envelope ``{"data": ..., "request_id": ...}``."""
    resp.status = status
    resp.media = {"data": data, "request_id": req.context.request_id}


def ok_text(req: falcon.Request, resp: falcon.Response, data: str) -> None:
    """``ok`` for a ``data`` already serialised to JSON text (answers made row by row)."""
    resp.content_type = falcon.MEDIA_JSON
    resp.text = f'{{"data": {data}, "request_id": {json.dumps(req.context.request_id)}}}'


def scope(req: falcon.Request, needed: str) -> Scope:
    """The caller's namespace scope, after checking it holds the ``needed`` scope. On a
    route whose routine authenticates the caller (the middleware read no credential) the
    credential is read here."""
    if req.context.principal is None:
        req.context.principal = auth.authenticate(req.context.db, req.get_header("Authorization"))
    principal = req.context.principal
    principal.require(needed)
    return Scope(req.context.db, principal)


def own_body(req: falcon.Request, shape: Shape, max_bytes: int, needed: str) -> dict[str, Any]:
    """``read_json`` on a route whose routine authenticates the caller. A body it refuses is
    answered as on every route, who the caller is and what it may do (401, 403) before what
    it sent, so only that path reads the credential here."""
    try:
        return read_json(req, shape, max_bytes)
    except errors.OrbitError:
        scope(req, needed)
        raise


# Public ids of credentials limited to some queues, which a routine that authenticates its
# caller refuses (QUEUE_SCOPED): their requests take the path that checks each item at once.
# Which path a request takes is all this decides; both check the credential from the database.
_QUEUE_SCOPED: dict[str, None] = {}
QUEUE_SCOPED_MAX = 10_000


def as_caller(
    req: falcon.Request,
    needed: str,
    direct: Callable[[tuple[str, str]], Any],
    scoped: Callable[[Scope], Any],
) -> Any:
    """A worker route's change in one round trip: ``direct((credential public id, token
    SHA-256))`` calls the ``*_as`` routine, which authenticates the caller and checks
    ``needed`` in the same call (a revoked credential is refused from its next request). A
    credential limited to some queues is read first instead and each item checked against its
    queues (SPEC L4) in ``scoped(scope)``, which calls the routine that takes a namespace."""
    bearer = auth.bearer(req.get_header("Authorization"))
    if bearer[0] not in _QUEUE_SCOPED:
        try:
            return direct(bearer)
        except errors.QueueScoped:
            if len(_QUEUE_SCOPED) >= QUEUE_SCOPED_MAX:
                _QUEUE_SCOPED.clear()
            _QUEUE_SCOPED[bearer[0]] = None
    return scoped(scope(req, needed))


def item(answer: Any, status: int = 200) -> dict[str, Any]:
    """One answer of a batch: ``{"status", "data"}``, or ``{"status", "error"}`` for an
    OrbitError."""
    if isinstance(answer, errors.OrbitError):
        return {
            "status": answer.status,
            "error": {"code": answer.code, "message": answer.message, "details": answer.details},
        }
    return {"status": status, "data": answer}


def in_scope_batch(
    items: list[Any],
    prepare: Callable[[Any], Any],
    run: Callable[[list[Any]], list[Any]],
    run_empty: bool = False,
) -> list[Any]:
    """Answers of a batch in the request's order. ``prepare`` checks an item against the
    credential's scope and returns what to send for it; an item it answers NOT_FOUND for is
    never sent. The rest go to ``run`` in one call, made with none left only if
    ``run_empty`` (a call that does more than the items)."""
    answers: list[Any] = [None] * len(items)
    chosen, prepared = [], []
    for i, one in enumerate(items):
        try:
            prepared.append(prepare(one))
            chosen.append(i)
        except errors.NotFound as exc:
            answers[i] = exc
    if prepared or run_empty:
        for i, answer in zip(chosen, run(prepared), strict=True):
            answers[i] = answer
    return answers


def in_scope_results(
    s: Scope, results: list[dict], run: Callable[[list[dict]], list[Any]], run_empty: bool = False
) -> list[Any]:
    """``in_scope_batch`` for a batch of results: each names an attempt that must be of the
    credential's queues."""

    def prepare(result: dict) -> dict:
        s.check_attempt_queue(result["attempt_id"])
        return result

    return in_scope_batch(results, prepare, run, run_empty)
