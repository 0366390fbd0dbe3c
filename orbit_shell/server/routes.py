"""The route table: the single list that app.py mounts and openapi.py documents."""

from __future__ import annotations

from dataclasses import dataclass

from orbit_shell import policy_shapes, task_shapes
from orbit_shell import validation as v
from orbit_shell import worker_shapes as w
from orbit_shell.server import schedules as sch


@dataclass(frozen=True)
class Op:
    summary: str
    scope: str | None  # None = no authentication
    body: v.Shape | None = None
    status: int = 200
    response: str = "Envelope"


@dataclass(frozen=True)
class Route:
    path: str
    resource: str  # key in the resources dict built by create_app
    suffix: str | None
    ops: dict[str, Op]

    @property
    def falcon_path(self) -> str:
        """The path as Falcon routes it: a concurrency key may hold slashes (``object/42``),
        so it takes the rest of the path (Falcon's ``path`` converter)."""
        return self.path.replace("{concurrency_key}", "{concurrency_key:path}")


ROUTES: list[Route] = [
    Route("/healthz", "health", None, {"get": Op("Liveness", None)}),
    Route("/readyz", "ready", None, {"get": Op("Database reachable and schema current", None)}),
    Route("/metrics", "metrics", None, {"get": Op("Prometheus metrics", None, response="Text")}),
    Route("/v1/openapi.json", "openapi", None, {"get": Op("This document", None, response="Raw")}),
    Route(
        "/v1/queues",
        "queues",
        None,
        {
            "post": Op("Create a queue", "queues:manage", v.QUEUE_CREATE, 201),
            "get": Op("List queues", "queues:manage"),
        },
    ),
    Route("/v1/queues/{queue_id}", "queues", "item", {"get": Op("Read a queue", "queues:manage")}),
    Route(
        "/v1/queues/{queue_id}/pause",
        "queues",
        "pause",
        {"post": Op("Pause a queue", "queues:manage", v.EMPTY)},
    ),
    Route(
        "/v1/queues/{queue_id}/resume",
        "queues",
        "resume",
        {"post": Op("Resume a queue", "queues:manage", v.EMPTY)},
    ),
    Route(
        "/v1/tasks",
        "tasks",
        None,
        {
            "post": Op(
                "Submit a task (Idempotency-Key header required)",
                "tasks:submit",
                task_shapes.TASK_SUBMIT,
                201,
            ),
            "get": Op("List tasks (filters, cursor pagination)", "tasks:read"),
        },
    ),
    Route(
        "/v1/tasks/batch",
        "tasks",
        "batch",
        {
            "post": Op(
                "Submit up to 100 tasks, each with its own idempotency_key and result",
                "tasks:submit",
                task_shapes.TASK_BATCH,
                response="BatchEnvelope",
            )
        },
    ),
    Route("/v1/tasks/{task_id}", "tasks", "item", {"get": Op("Read a task", "tasks:read")}),
    Route(
        "/v1/tasks/{task_id}/attempts",
        "tasks",
        "attempts",
        {"get": Op("List a task's attempts", "tasks:read")},
    ),
    Route(
        "/v1/tasks/{task_id}/attempts/{number}",
        "tasks",
        "attempt",
        {"get": Op("Read one attempt", "tasks:read")},
    ),
    Route(
        "/v1/tasks/{task_id}/history",
        "tasks",
        "history",
        {"get": Op("A task's state history", "tasks:read")},
    ),
    Route(
        "/v1/tasks/{task_id}/cancel",
        "tasks",
        "cancel",
        {"post": Op("Cancel a task that has not started", "tasks:manage", v.EMPTY)},
    ),
    Route(
        "/v1/tasks/{task_id}/resolve",
        "tasks",
        "resolve",
        {"post": Op("Resolve a NEEDS_REVIEW task", "tasks:manage", v.TASK_RESOLVE)},
    ),
    Route(
        "/v1/keys",
        "keys",
        None,
        {"get": Op("List held and contended keys, longest wait first, or idle keys", "tasks:read")},
    ),
    Route(
        "/v1/keys/{concurrency_key}",
        "keys",
        "item",
        {
            "get": Op(
                "Inspect a concurrency key: holder, tokens, ready and parked tasks", "tasks:read"
            )
        },
    ),
    Route(
        "/v1/key-policies",
        "key_policies",
        None,
        {
            "post": Op(
                "Create a key policy: how many holders keys admit",
                "queues:manage",
                policy_shapes.KEY_POLICY,
                201,
            ),
            "get": Op("List key policies", "queues:manage"),
        },
    ),
    Route(
        "/v1/key-policies/{policy_id}",
        "key_policies",
        "item",
        {
            "get": Op("Read a key policy", "queues:manage"),
            "put": Op("Change a key policy", "queues:manage", policy_shapes.KEY_POLICY),
            "delete": Op(
                "Delete a key policy (its keys take the next rule's limit, or 1)", "queues:manage"
            ),
        },
    ),
    Route(
        "/v1/schedules",
        "schedules",
        None,
        {
            "post": Op("Create a schedule", "queues:manage", sch.SCHEDULE_CREATE, 201),
            "get": Op("List schedules", "tasks:read"),
        },
    ),
    Route(
        "/v1/schedules/{schedule_id}",
        "schedules",
        "item",
        {"get": Op("Read a schedule", "tasks:read")},
    ),
    Route(
        "/v1/schedules/{schedule_id}/versions",
        "schedules",
        "versions",
        {
            "post": Op(
                "Add a version (rule and/or definition)", "queues:manage", sch.SCHEDULE_VERSION, 201
            )
        },
    ),
    Route(
        "/v1/schedules/{schedule_id}/pause",
        "schedules",
        "pause",
        {"post": Op("Pause a schedule", "queues:manage", v.EMPTY)},
    ),
    Route(
        "/v1/schedules/{schedule_id}/resume",
        "schedules",
        "resume",
        {"post": Op("Resume a schedule", "queues:manage", v.EMPTY)},
    ),
    Route(
        "/v1/workers/hello",
        "workers",
        "hello",
        {
            "post": Op(
                "Register or resume a worker session; its in-flight attempts a page at a time",
                "workers:connect",
                w.WORKER_HELLO,
            )
        },
    ),
    Route(
        "/v1/workers/{session_id}/claim",
        "workers",
        "claim",
        {
            "post": Op(
                "Claim tasks (bounded long poll); with start, started in the same transaction",
                "workers:consume",
                w.WORKER_CLAIM,
            )
        },
    ),
    Route(
        "/v1/workers/{session_id}/report-and-claim",
        "workers",
        "report_claim",
        {
            "post": Op(
                "Report up to 100 outcomes, then claim up to max tasks (with start, started),"
                " in one transaction",
                "workers:consume",
                w.WORKER_REPORT_CLAIM,
            )
        },
    ),
    Route(
        "/v1/workers/{session_id}/goodbye",
        "workers",
        "goodbye",
        {"post": Op("Close a worker session", "workers:connect", v.EMPTY)},
    ),
    Route(
        "/v1/attempts/start",
        "attempts",
        "start_batch",
        {
            "post": Op(
                "Start up to 100 attempts of one session, each as its own start",
                "workers:consume",
                w.ATTEMPT_START_BATCH,
                response="BatchEnvelope",
            )
        },
    ),
    Route(
        "/v1/attempts/result",
        "attempts",
        "result_batch",
        {
            "post": Op(
                "Report up to 100 outcomes of one session, each as its own result",
                "workers:consume",
                w.ATTEMPT_RESULT_BATCH,
                response="BatchEnvelope",
            )
        },
    ),
    Route(
        "/v1/attempts/{attempt_id}/start",
        "attempts",
        "start",
        {"post": Op("Confirm the execution right", "workers:consume", w.ATTEMPT_SESSION)},
    ),
    Route(
        "/v1/attempts/{attempt_id}/renew",
        "attempts",
        "renew",
        {"post": Op("Extend the lease and permits", "workers:consume", w.ATTEMPT_SESSION)},
    ),
    Route(
        "/v1/attempts/{attempt_id}/result",
        "attempts",
        "result",
        {"post": Op("Report the outcome", "workers:consume", w.ATTEMPT_RESULT)},
    ),
]
