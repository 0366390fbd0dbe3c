"""The Falcon application factory: routes, middleware and the one error boundary (SPEC 2).

Every response is JSON in the envelope: ``{"data": ..., "request_id"}`` on success and
``{"error": {"code", "message", "details"}, "request_id"}`` on failure, including unknown
routes, bad JSON, oversized bodies and unexpected exceptions (logged, never shown). The
operator dashboard under ``/ui/`` answers HTML pages instead (``server/ui``).
"""

from __future__ import annotations

import logging
import re
import time
import uuid

import falcon
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from orbit_shell import errors, validation
from orbit_shell.engine import schema
from orbit_shell.engine.db import Database
from orbit_shell.engine.longpoll import PollGate
from orbit_shell.server import auth, openapi
from orbit_shell.server.config import Config
from orbit_shell.server.dbmetrics import PurgeCollector, QueueCollector, RetentionCollector
from orbit_shell.server.guard import SubmitGuard
from orbit_shell.server.resources.attempts import Attempts
from orbit_shell.server.resources.key_policies import KeyPolicies
from orbit_shell.server.resources.keys import Keys
from orbit_shell.server.resources.queues import Queues
from orbit_shell.server.resources.schedules import Schedules
from orbit_shell.server.resources.system import Health, Metrics, OpenApi, Ready
from orbit_shell.server.resources.tasks import Tasks
from orbit_shell.server.resources.workers import Workers
from orbit_shell.server.routes import ROUTES
from orbit_shell.server.ui import pages as dashboard
from orbit_shell.server.ui.session import Sessions
from orbit_shell.server.wakeups import Wakeups
from orbit_shell.validation import HEX32

log = logging.getLogger("orbit.api")
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# L5: metric labels come from closed sets. A client can send any method name; each new one
# used to add a series (18 per name), so the page grew without bound.
METRIC_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
NUMBER_RE = re.compile(r"^[1-9][0-9]{0,6}$")
STATUS_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    409: "STATE_CONFLICT",
    411: "INVALID_ARGUMENT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "QUOTA_EXCEEDED",
    503: "UNAVAILABLE",
}


class RequestContext:
    """Request id, database handle, authentication and metrics for every request."""

    def __init__(self, database: Database, registry: CollectorRegistry) -> None:
        self.db = database
        self.requests = Counter(
            "orbit_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "orbit_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=registry,
        )

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        incoming = req.get_header("X-Request-Id") or ""
        req.context.request_id = incoming if REQUEST_ID_RE.match(incoming) else uuid.uuid4().hex
        req.context.db = self.db
        req.context.started = time.perf_counter()

    def process_resource(self, req, resp, resource, params) -> None:
        # A handler named in the resource's ``self_authenticating`` reads the credential in
        # the same call as its change (POST /v1/tasks and the worker's calls after hello: one
        # round trip, the ``*_as`` routines).
        own = (req.method, req.uri_template) in getattr(resource, "self_authenticating", ())
        if own:
            req.context.principal = None
        elif resource is not None and not getattr(resource, "auth_exempt", False):
            req.context.principal = auth.authenticate(self.db, req.get_header("Authorization"))
        # Every path id is 32 lowercase hex (attempt numbers are digits), and a key is what K2
        # accepts: anything else cannot exist, so it is a 404 here, before any query sees it.
        for name, value in params.items():
            if name == "concurrency_key":
                try:
                    valid = validation.validate_concurrency_key(value) != ""
                except errors.InvalidArgument:
                    valid = False
            else:
                valid = bool((NUMBER_RE if name == "number" else HEX32).match(value))
            if not valid:
                if own:  # who the caller is (401) before what it named (404), as elsewhere
                    auth.authenticate(self.db, req.get_header("Authorization"))
                raise errors.NotFound(f"{name.removesuffix('_id').replace('_', ' ')} not found")

    def process_response(self, req, resp, resource, req_succeeded) -> None:
        resp.set_header("X-Request-Id", req.context.request_id)
        # Every answer: no content sniffing (a JSON body is never run as a page), and no
        # address of a page (a task id, a key) sent on to another site ("no-referrer" would make
        # browsers send "Origin: null" with the dashboard's own forms).
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.set_header("Referrer-Policy", "same-origin")
        route = req.uri_template or "unmatched"
        method = req.method if req.method in METRIC_METHODS else "other"
        self.requests.labels(method, route, str(resp.status_code)).inc()
        self.latency.labels(method, route).observe(time.perf_counter() - req.context.started)


def _error_body(req: falcon.Request, code: str, message: str, details=None) -> dict:
    return {
        "error": {"code": code, "message": message, "details": details or []},
        "request_id": getattr(req.context, "request_id", None) or uuid.uuid4().hex,
    }


def _is_page(req: falcon.Request) -> bool:
    return req.path == "/ui" or req.path.startswith("/ui/")


class ErrorBoundary:
    """Falcon's error handlers: the envelope for the API, an HTML page with the pages' headers
    under ``/ui/`` (a JSON body on an HTML response cannot be serialised: Falcon answered such
    an error as an empty 415)."""

    def __init__(self, pages: dashboard.Dashboard) -> None:
        self.pages = pages

    def _answer(self, req, resp, status: int, code: str, message: str, details=None) -> None:
        if _is_page(req):
            self.pages.error_page(req, resp, status, code, message)
            return
        resp.status = status
        resp.content_type = falcon.MEDIA_JSON
        resp.media = _error_body(req, code, message, details)

    def orbit_error(self, req, resp, ex: errors.OrbitError, params) -> None:
        self._answer(req, resp, ex.status, ex.code, ex.message, ex.details)
        if isinstance(ex, errors.Unauthenticated) and not _is_page(req):
            resp.set_header("WWW-Authenticate", "Bearer")
        if getattr(ex, "retry_after", None):
            resp.set_header("Retry-After", str(ex.retry_after))

    def http_error(self, req, resp, ex: falcon.HTTPError, params) -> None:
        status = ex.status_code
        code = STATUS_CODES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        self._answer(req, resp, status, code, ex.title or code)
        if ex.headers and "Allow" in ex.headers:  # 405: the methods the path has
            resp.set_header("Allow", ex.headers["Allow"])

    def unexpected(self, req, resp, ex: Exception, params) -> None:
        log.exception("unhandled error", extra={"action": "http.error", "path": req.path})
        self._answer(req, resp, 500, "INTERNAL", "internal error")


def create_app(
    config: Config,
    database: Database | None = None,
    registry: CollectorRegistry | None = None,
    wakeups: Wakeups | None = None,
) -> falcon.App:
    """Build the WSGI app. Connections are opened lazily, so it is safe before a fork.
    ``wakeups``: how submissions wake waiting polls (by default within this process only)."""
    wakeups = wakeups or Wakeups()
    database = database or Database(
        config.dsn,
        pool_size=config.db_pool_size,
        max_open=config.db_max_open,
        routines=schema.version(),
        io_timeout=config.db_timeout,
    )
    registry = registry or CollectorRegistry()
    app = falcon.App(middleware=[RequestContext(database, registry)])
    app.req_options.strip_url_path_trailing_slash = False
    resources = {
        "health": Health(),
        "ready": Ready(config.dsn),
        "metrics": Metrics(
            registry,
            [PurgeCollector(database), QueueCollector(database), RetentionCollector(database)],
            config.metrics_token,
        ),
        "openapi": OpenApi(openapi.build()),
        "queues": Queues(config.max_body_bytes),
        "tasks": Tasks(
            config.max_body_bytes, SubmitGuard(config.submit_rate, config.submit_burst), wakeups
        ),
        "workers": Workers(
            config.max_body_bytes,
            PollGate(
                config.longpoll_per_credential,
                config.longpoll_max,
                config.http_workers,
                Gauge(
                    "orbit_longpolls_open",
                    "Long-poll claims the server holds now",
                    registry=registry,
                    multiprocess_mode="livesum",
                ),
            ),
            wakeups,
        ),
        "attempts": Attempts(config.max_body_bytes),
        "schedules": Schedules(config.max_body_bytes),
        "keys": Keys(),
        "key_policies": KeyPolicies(config.max_body_bytes),
    }
    for route in ROUTES:
        kwargs = {"suffix": route.suffix} if route.suffix else {}
        app.add_route(route.falcon_path, resources[route.resource], **kwargs)
    sessions = Sessions(
        (config.session_secret or "").encode(),
        config.session_seconds,
        config.public_url,
        bool(config.trust_forwarded),
    )
    boundary = ErrorBoundary(dashboard.mount(app, database, sessions))
    # Most specific first: Falcon picks the handler of the nearest class in the MRO.
    app.add_error_handler(Exception, boundary.unexpected)
    app.add_error_handler(falcon.HTTPError, boundary.http_error)
    app.add_error_handler(errors.OrbitError, boundary.orbit_error)
    return app
