"""Small HTTP helpers for tests: submit tasks, run a worker session through the API."""

from __future__ import annotations

import argparse
import secrets
from typing import Any
from urllib.parse import urlparse

from orbit_shell.cli.admin import WORKER_PROCEDURES, worker_account
from orbit_shell.engine import db
from orbit_shell.server import auth

# A text long enough that a batch of a few items carrying it passes batch_items_read's bound
# (the loop's reads x the batch's bytes over 16 KiB), so the batch procedures read their
# items from batch_items; with quotes, a backslash, a newline and characters beyond ASCII.
LONG_TEXT = 'é "q" \\ 😀\n' * 160


def task_body(queue_id: str, **fields: Any) -> dict[str, Any]:
    body = {
        "queue_id": queue_id,
        "handler": "object.update",
        "handler_version": "v1",
        "payload_version": "v1",
        "payload": {"n": 1},
    }
    body.update(fields)
    return body


def submit(client, tenant, idem: str | None = None, expect: int | None = 201, **fields):
    headers = {**tenant.headers, "Idempotency-Key": idem or secrets.token_hex(8)}
    result = client.simulate_post(
        "/v1/tasks",
        json=task_body(fields.pop("queue_id", tenant.queue_id), **fields),
        headers=headers,
    )
    if expect is not None:
        assert result.status_code == expect, result.text
    return result


class Session:
    """A worker session driven through the HTTP API."""

    def __init__(self, client, tenant, queue_ids=None, capacity=4, keys=True, worker_id=None):
        self.client, self.tenant = client, tenant
        result = client.simulate_post(
            "/v1/workers/hello",
            headers=tenant.headers,
            json={
                "worker_id": worker_id or "w-" + secrets.token_hex(4),
                "queue_ids": queue_ids or [tenant.queue_id],
                "capacity": capacity,
                "concurrency_keys": keys,
            },
        )
        assert result.status_code == 200, result.text
        self.hello = result.json["data"]
        self.id = self.hello["session_id"]

    def claim(self, max: int = 4, wait_ms: int = 0, start: bool = False) -> list[dict]:
        result = self.client.simulate_post(
            f"/v1/workers/{self.id}/claim",
            headers=self.tenant.headers,
            json={"max": max, "wait_ms": wait_ms, "start": start},
        )
        assert result.status_code == 200, result.text
        return result.json["data"]["assignments"]

    def call(self, attempt_id: str, action: str, **body):
        return self.client.simulate_post(
            f"/v1/attempts/{attempt_id}/{action}",
            headers=self.tenant.headers,
            json={"session_id": self.id, **body},
        )

    def start(self, attempt_id: str):
        return self.call(attempt_id, "start")

    def finish(self, attempt_id: str, outcome: str = "succeeded", **body):
        return self.call(attempt_id, "result", outcome=outcome, **body)


def limited_credential(database, tenant, scopes: str) -> dict[str, str]:
    """A credential of the tenant's namespace limited to its first queue."""
    token, public_id, digest = auth.new_token()
    [row] = database.query(
        "SELECT * FROM credentials WHERE public_id = %s", (tenant.token.split("_")[1],)
    )
    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO credentials (public_id, application_id, environment_id, "
                "namespace_id, secret_sha256, scopes, all_queues, created_at) VALUES "
                "(%s, %s, %s, %s, %s, %s, 0, UTC_TIMESTAMP(6))",
                (
                    public_id,
                    row["application_id"],
                    row["environment_id"],
                    row["namespace_id"],
                    digest,
                    scopes,
                ),
            )
            cur.execute(
                "INSERT INTO credential_queues SELECT LAST_INSERT_ID(), id FROM queues "
                "WHERE public_id = %s",
                (tenant.queue_id,),
            )
    finally:
        conn.close()
    return {"Authorization": f"Bearer {token}"}


def waiting_in_bulk(database, tenant, queue_id: str, count: int, lane: str, key: str = ""):
    """Insert ``count`` WAITING tasks in ``lane`` straight into a queue of the tenant, in the
    state task_submit leaves them in: a backlog past the counts' bound in a second, where
    10,000 submissions would take minutes. The queue row's kept counters are not touched.
    Returns the internal ids' range, for ``delete_tasks``."""
    [q] = database.query("SELECT id FROM queues WHERE public_id = %s", (queue_id,))
    tag = secrets.token_hex(6)
    rows = [
        (
            secrets.token_hex(16),
            tenant.namespace_id,
            tenant.application_id,
            q["id"],
            f"bulk-{tag}-{n}",
            key,
            lane,
        )
        for n in range(count)
    ]
    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            for at in range(0, count, 2_000):
                cur.executemany(
                    "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                    "idempotency_key, handler, handler_version, payload_version, payload, "
                    "concurrency_key, priority, state, lane, max_attempts, available_at, "
                    "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, 'bulk', 'v1', 'v1', "
                    "'{}', %s, 5, 'WAITING', %s, 3, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), "
                    "UTC_TIMESTAMP(6))",
                    rows[at : at + 2_000],
                )
            cur.execute(
                "SELECT MIN(id) AS first, MAX(id) AS last FROM tasks WHERE queue_id = %s "
                "AND idempotency_key LIKE %s",
                (q["id"], f"bulk-{tag}-%"),
            )
            span = cur.fetchone()
    finally:
        conn.close()
    return span["first"], span["last"]


def delete_tasks(database, span: tuple[int, int]) -> None:
    """Remove what ``waiting_in_bulk`` inserted (the session's database is shared)."""
    conn = db.connect(database.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM tasks WHERE id BETWEEN %s AND %s AND handler = 'bulk'", span)
    finally:
        conn.close()


def account_dsn(orbit_dsn, server, name: str, out, tenant, procedures=None) -> str:
    """A direct account made with orbit-admin (the worker procedures, or ``procedures``),
    bound to ``tenant``'s namespace; its DSN, reaching the test server over TCP."""
    doc = worker_account(
        orbit_dsn,
        argparse.Namespace(
            user=name,
            host="localhost",
            output=str(out),
            application=tenant.application,
            environment="test",
            namespace=tenant.namespace,
        ),
        procedures or WORKER_PROCEDURES,
    )
    url = urlparse(doc["dsn"])
    suffix = f"?unix_socket={server.socket}" if server.socket else ""
    return f"mysql://{url.username}:{url.password}@{server.host}:{server.port}{url.path}{suffix}"


def answer_protocol(dsn: str, column: str, protocol: int | None) -> None:
    """Install ``worker_namespace`` anew with the protocol number it answers in ``column``
    (worker_protocol, submit_protocol) changed to ``protocol``, or left out for None: a
    database of another version, as a direct worker or producer would meet it."""
    from orbit_shell.engine import schema

    body = schema.versioned_body(next(r for r in schema.routines() if r.name == "worker_namespace"))
    [answer] = [line for line in body.splitlines() if f"AS {column}" in line]
    number = answer.split(f"AS {column}")[0].rsplit(None, 1)[-1]
    other = "" if protocol is None else f"{protocol} AS {column}"
    changed = body.replace(f"{number} AS {column}", other or "NULL AS unused_protocol")
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP PROCEDURE {schema.routine_name('worker_namespace')}")
            cur.execute(changed)
    finally:
        conn.close()
