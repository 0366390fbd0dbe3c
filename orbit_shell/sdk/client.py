"""The API client SDK (W6): typed results, typed errors, connection reuse, timeouts, and retries
only where they are safe.

Safe to retry: reads (GET), submissions (the Idempotency-Key makes a repeat return the original
receipt), results (a repeated identical result returns the stored outcome) and hello (resumes
the session). Claim, start, renew and the queue/task actions are not retried by the client.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from typing import Any

import urllib3
from urllib3.connectionpool import HTTPConnectionPool

from orbit_shell import errors, validation
from orbit_shell.sdk.models import (
    ApiError,
    Attempt,
    KeyPolicy,
    Queue,
    SubmitReceipt,
    SubmitResult,
    SubmitTaskRequest,
    Task,
    TaskPage,
    UnavailableError,
    api_error,
    batch_results,
    local_error,
)

# Orbit answers 503 itself when its database is out of reach; a gateway in front of it answers
# 502 or 504 with a page of its own. All three are Orbit unavailable (UnavailableError).
GATEWAY_ERRORS = frozenset({502, 503, 504})


def _pool_for(base_url: str, pool_size: int) -> urllib3.ProxyManager | HTTPConnectionPool:
    """A pool of keep-alive connections to ``base_url``, through the proxy the environment
    names for it (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``) and trusting the CA bundle in
    ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` when set (the system's otherwise). Read once,
    when the client is made.

    Without a proxy it is the host's own connection pool: every request goes to that one
    host, and a ``PoolManager`` in front would parse each URL and look its pool up again
    (0.07 of the 0.42 ms of CPU a submission cost the sending process)."""
    options: dict[str, Any] = {"maxsize": pool_size, "block": False}
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        options["ca_certs"] = bundle
    parts = urllib.parse.urlsplit(base_url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        return urllib3.ProxyManager(proxy, **options)
    if parts.scheme != "https":
        options.pop("ca_certs", None)  # a plain HTTP connection takes no TLS settings
    return urllib3.connection_from_url(base_url, **options)


class Client:
    """HTTP client for one credential, safe to share between threads.

    It sends through urllib3's connection pool for the host rather than ``requests``: a
    submission cost the sending process 1.0 ms of CPU through a ``requests.Session``, 0.42 ms
    through urllib3's pool manager and 0.34 ms through the host's pool (``_pool_for``), and
    submitters and workers pay it on every call.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080``.
        token: the bearer token (``orb_...``).
        timeout: seconds per request (connect and read).
        retries: extra tries for safe calls on connection errors, 503, and a gateway's 502
            or 504.
        pool_size: keep-alive connections kept per host (threads sending at once beyond it
            open a connection for that request).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float = 10.0,
        retries: int = 3,
        pool_size: int = 10,
        sleep=time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
        self.pool_size = pool_size
        self.http = _pool_for(self.base_url, pool_size)
        # A request names its target by path alone to the host's pool, by URL to a proxy.
        self.prefix = "" if self.proxied else urllib.parse.urlsplit(self.base_url).path
        self.headers = {"Accept": "application/json", "Authorization": f"Bearer {token}"}
        self._timeouts: dict[float, urllib3.Timeout] = {}

    @property
    def proxied(self) -> bool:
        return isinstance(self.http, urllib3.ProxyManager)

    @classmethod
    def from_credentials_file(cls, base_url: str, path: str, **kwargs: Any) -> Client:
        with open(path, encoding="utf-8") as handle:
            return cls(base_url, json.load(handle)["token"], **kwargs)

    def close(self) -> None:
        """Close the kept-alive connections; a later call opens new ones."""
        closing, self.http = self.http, _pool_for(self.base_url, self.pool_size)
        if isinstance(closing, urllib3.ProxyManager):
            closing.clear()
        else:
            closing.close()

    # Transport ------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params=None,
        headers=None,
        safe: bool = False,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        """Send one request; return ``(status, data)`` or raise the typed ApiError."""
        tries = 1 + (self.retries if safe else 0)
        headers = {**self.headers, **(headers or {})}
        if body is not None:
            headers["Content-Type"] = "application/json"
            # NaN and the infinities are not JSON; the server refuses them (400): refused here
            # (ValueError) before a request is sent.
            body = json.dumps(body, allow_nan=False).encode()
        url = (self.base_url if self.proxied else self.prefix) + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        seconds = timeout or self.timeout
        deadline = self._timeouts.get(seconds)
        if deadline is None:
            deadline = self._timeouts[seconds] = urllib3.Timeout(connect=seconds, read=seconds)
        for attempt in range(tries):
            try:
                # retries=False: a failure surfaces here, where only safe calls are retried.
                response = self.http.urlopen(
                    method,
                    url,
                    body=body,
                    headers=headers,
                    timeout=deadline,
                    retries=False,
                    redirect=False,
                )
            except urllib3.exceptions.HTTPError as exc:
                if attempt + 1 < tries:
                    self.sleep(min(0.1 * 2**attempt, 2.0))
                    continue
                raise UnavailableError("UNAVAILABLE", 0, f"cannot reach Orbit: {exc}") from exc
            if response.status in GATEWAY_ERRORS and attempt + 1 < tries:
                self.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            return response.status, self._decode(response.status, response.data)
        raise AssertionError("unreachable")

    @staticmethod
    def _decode(status: int, raw: bytes) -> Any:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not (isinstance(body, dict) and ("data" in body or isinstance(body.get("error"), dict))):
            # Not Orbit's envelope: something between answered. A gateway's error page
            # (502, 503, 504: Orbit restarting, unreachable or slow behind nginx or a load
            # balancer) is Orbit unavailable, with the call perhaps committed, as a lost answer.
            text = raw[:200].decode("utf-8", "replace")
            if status in GATEWAY_ERRORS:
                raise UnavailableError("UNAVAILABLE", status, f"gateway error page: {text}")
            raise ApiError("INTERNAL", status, f"not an Orbit response: {text}")
        if status >= 400 or "error" in body:
            err = body.get("error") or {}
            raise api_error(
                err.get("code", "INTERNAL"),
                status,
                err.get("message", ""),
                err.get("details"),
                body.get("request_id"),
            )
        return body["data"]

    # Tasks ----------------------------------------------------------------------------------
    def submit_task(self, idempotency_key: str, request: SubmitTaskRequest) -> SubmitResult:
        """Submit a task; ``created`` is False when the key was already accepted (same content).

        Raises:
            InvalidArgumentError: the key is not one the server takes, found before sending:
                HTTP would drop a space at either end, and the task would be submitted under
                another key.
            IdempotencyConflictError: the key was used with different content.
            QuotaExceededError: an unfinished-task quota is reached.
        """
        try:
            validation.idempotency_key(idempotency_key)
        except errors.OrbitError as exc:
            raise local_error(exc) from exc
        status, data = self.request(
            "POST",
            "/v1/tasks",
            request.to_json(),
            headers={"Idempotency-Key": idempotency_key},
            safe=True,
        )
        return SubmitResult(Task.from_json(data), created=status == 201)

    def submit_tasks(
        self, items: list[tuple[str, SubmitTaskRequest]]
    ) -> list[SubmitReceipt | ApiError]:
        """Submit up to 100 tasks in one request, each with its own Idempotency-Key; returns,
        in order, a receipt or the typed error that item got (the others are unaffected)."""
        _, data = self.request(
            "POST",
            "/v1/tasks/batch",
            {"tasks": [{"idempotency_key": key, **req.to_json()} for key, req in items]},
            safe=True,
        )
        return [
            r if isinstance(r, ApiError) else SubmitReceipt(r["task_id"], r["created"])
            for r in batch_results(data)
        ]

    def get_task(self, task_id: str) -> Task:
        return Task.from_json(self.request("GET", f"/v1/tasks/{task_id}", safe=True)[1])

    def list_tasks(
        self,
        *,
        queue_id: str | None = None,
        state: str | None = None,
        business_key: str | None = None,
        concurrency_key: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> TaskPage:
        params = {
            k: v
            for k, v in {
                "queue_id": queue_id,
                "state": state,
                "business_key": business_key,
                "concurrency_key": concurrency_key,
                "cursor": cursor,
                "limit": limit,
            }.items()
            if v is not None
        }
        data = self.request("GET", "/v1/tasks", params=params, safe=True)[1]
        return TaskPage([Task.from_json(t) for t in data["tasks"]], data["next_cursor"])

    def list_attempts(self, task_id: str, page: int = 200) -> list[Attempt]:
        """Every attempt of the task, read ``page`` at a time (the route answers a page)."""
        out: list[Attempt] = []
        while True:
            params = {"cursor": out[-1].attempt_number if out else 0, "limit": page}
            data = self.request("GET", f"/v1/tasks/{task_id}/attempts", params=params, safe=True)
            out += [Attempt.from_json(a) for a in data[1]]
            if len(data[1]) < page:
                return out

    def get_attempt(self, task_id: str, number: int) -> Attempt:
        data = self.request("GET", f"/v1/tasks/{task_id}/attempts/{number}", safe=True)[1]
        return Attempt.from_json(data)

    def cancel_task(self, task_id: str) -> Task:
        return Task.from_json(self.request("POST", f"/v1/tasks/{task_id}/cancel", {})[1])

    def resolve_task(self, task_id: str, state: str, note: str | None = None) -> Task:
        body = {"state": state, **({"note": note} if note else {})}
        return Task.from_json(self.request("POST", f"/v1/tasks/{task_id}/resolve", body)[1])

    # Queues ---------------------------------------------------------------------------------
    def create_queue(self, name: str, **settings: Any) -> Queue:
        return Queue.from_json(self.request("POST", "/v1/queues", {"name": name, **settings})[1])

    def list_queues(self) -> list[Queue]:
        return [Queue.from_json(q) for q in self.request("GET", "/v1/queues", safe=True)[1]]

    def get_queue(self, queue_id: str) -> Queue:
        return Queue.from_json(self.request("GET", f"/v1/queues/{queue_id}", safe=True)[1])

    def pause_queue(self, queue_id: str) -> Queue:
        return Queue.from_json(self.request("POST", f"/v1/queues/{queue_id}/pause", {})[1])

    def resume_queue(self, queue_id: str) -> Queue:
        return Queue.from_json(self.request("POST", f"/v1/queues/{queue_id}/resume", {})[1])

    def set_key_policy(
        self,
        limit: int,
        *,
        key: str | None = None,
        prefix: str | None = None,
        rate: tuple[int, int] | None = None,
    ) -> KeyPolicy:
        """Create or change the policy of ``key`` or of ``prefix`` (exactly one): its keys
        admit ``limit`` holders at once (P1), and with ``rate=(permits, per_seconds)`` at most
        ``permits`` of their permits begin in any ``per_seconds`` (P6). A change reaches the
        keys at once (P3)."""
        if (key is None) == (prefix is None):
            raise ValueError("give exactly one of key and prefix")
        body: dict[str, Any] = {"key": key} if prefix is None else {"prefix": prefix}
        if rate is not None:
            body["rate"] = {"permits": rate[0], "per_seconds": rate[1]}
        found = [p for p in self.list_key_policies() if (p.key, p.prefix) == (key, prefix)]
        if found:
            path = f"/v1/key-policies/{found[0].policy_id}"
            return KeyPolicy.from_json(self.request("PUT", path, {**body, "limit": limit})[1])
        return KeyPolicy.from_json(
            self.request("POST", "/v1/key-policies", {**body, "limit": limit})[1]
        )

    def list_key_policies(self) -> list[KeyPolicy]:
        answer = self.request("GET", "/v1/key-policies", safe=True)[1]
        return [KeyPolicy.from_json(p) for p in answer]

    def delete_key_policy(self, policy_id: str) -> None:
        self.request("DELETE", f"/v1/key-policies/{policy_id}")
