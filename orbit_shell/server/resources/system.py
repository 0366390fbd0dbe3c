"""Unauthenticated operational routes: /healthz, /readyz, /metrics, /v1/openapi.json."""

from __future__ import annotations

import concurrent.futures
import hmac
import os

import falcon
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.registry import Collector

from orbit_shell import errors
from orbit_shell.engine import schema
from orbit_shell.server import auth
from orbit_shell.server.common import ok


class Health:
    auth_exempt = True

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(req, resp, {"status": "ok"})


class Ready:
    """Ready when the database answers and its schema is the version this server ships.

    Answers within ``BUDGET`` seconds whatever the listed hosts do: the check runs beside the
    request, which stops waiting for it then (a probe that hangs is not a readiness answer).
    The check's own connection gives up after ``CHECK_TIMEOUT`` at each step, so checks left
    behind by a silent server end soon and never pile up."""

    auth_exempt = True
    BUDGET = 0.9
    CHECK_TIMEOUT = 2.0

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.checks = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="readyz")

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        check = self.checks.submit(schema.check, self.dsn, self.CHECK_TIMEOUT)
        try:
            check.result(timeout=self.BUDGET)
        except concurrent.futures.TimeoutError:
            raise _unready(f"the database did not answer within {self.BUDGET} s") from None
        except schema.SchemaMismatch as exc:
            raise _unready(f"schema: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - any failure to reach the database is "not ready"
            raise _unready("database unavailable") from exc
        ok(req, resp, {"status": "ready"})


def _unready(message: str) -> errors.Unavailable:
    error = errors.Unavailable(message)
    error.retry_after = 1
    return error


class Metrics:
    """Prometheus text for the whole server. Under ``orbit`` every gunicorn worker process
    writes its samples to ``PROMETHEUS_MULTIPROC_DIR`` and a scrape adds up all of them,
    whichever worker answers it; without that directory (an app made in-process), the app's
    own registry. The database's gauges (``dbmetrics``: purge, and per queue what operators
    alert on) are read at each scrape.

    With a ``token`` (``ORBIT_METRICS_TOKEN``) a scrape must send ``Authorization: Bearer
    <token>`` (401 otherwise); without one the page is open to whoever reaches the server
    (L5: who may read it is the operator's choice, and the default is said in docs/limits.md)."""

    auth_exempt = True

    def __init__(self, registry, database: list[Collector], token: str | None = None) -> None:
        self.token = token
        self.registry = registry
        self.database = database  # collectors that read the database at each scrape
        self.shared = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        if not self.shared:
            for collector in database:
                registry.register(collector)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self.token is not None:
            sent = auth.bearer_token(req.get_header("Authorization")) or ""
            if not hmac.compare_digest(sent.encode(), self.token.encode()):
                raise errors.Unauthenticated("/metrics needs the metrics token")
        registry = self.registry
        if self.shared:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            for collector in self.database:
                registry.register(collector)
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = generate_latest(registry)


class OpenApi:
    auth_exempt = True

    def __init__(self, document: dict) -> None:
        self.document = document

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.document
