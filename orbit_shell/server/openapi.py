"""The OpenAPI 3 document, generated from the route table and the request shapes."""

from __future__ import annotations

import re
from typing import Any

from orbit_shell.server.resources import keys, tasks
from orbit_shell.server.routes import ROUTES
from orbit_shell.validation import MAX_KEY_CHARS, ConcurrencyKey, IdempotencyKey

ERROR_CODES = [
    "INVALID_ARGUMENT",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "NOT_FOUND",
    "IDEMPOTENCY_CONFLICT",
    "STATE_CONFLICT",
    "LEASE_LOST",
    "METHOD_NOT_ALLOWED",
    "REQUEST_TIMEOUT",
    "PAYLOAD_TOO_LARGE",
    "UNSUPPORTED_MEDIA_TYPE",
    "QUOTA_EXCEEDED",
    "UNAVAILABLE",
    "INTERNAL",
]
# R2: how long an Idempotency-Key is remembered.
IDEMPOTENCY_WINDOW = (
    "Names one accepted command. It is remembered while its task exists: for ever while the "
    "task is unfinished or needs review, and for its namespace's retention (default 7 days, "
    "orbit-admin retention) after the task finished. Within that, the same key with the same "
    "request answers the task (200) and with another request 409; afterwards the task is "
    "deleted and the same key creates a new task (201)."
)
# The list routes' query parameters, as their resources check them.
QUERIES = {
    "/v1/tasks": tasks.LIST_QUERY,
    "/v1/keys": keys.LIST_QUERY,
    "/v1/tasks/{task_id}/attempts": tasks.PAGE_QUERY,
    "/v1/tasks/{task_id}/history": tasks.PAGE_QUERY,
}

PARAM_PATTERNS = {
    "number": "^[1-9][0-9]{0,6}$",
    "concurrency_key": ConcurrencyKey.schema["pattern"].replace(")?)?$", ")?)$", 1),
}


def build() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for route in ROUTES:
        item = paths.setdefault(route.path, {})
        for method, op in route.ops.items():
            params = [
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": {
                        "type": "string",
                        "pattern": PARAM_PATTERNS.get(name, "^[0-9a-f]{32}$"),
                        **({"maxLength": MAX_KEY_CHARS} if name == "concurrency_key" else {}),
                    },
                }
                for name in re.findall(r"{(\w+)}", route.path)
            ]
            if route.path == "/v1/tasks" and method == "post":
                params.append(
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "required": True,
                        "description": IDEMPOTENCY_WINDOW,
                        # A header's edges are spaces HTTP strips: the key is what is between.
                        "schema": {
                            **IdempotencyKey().schema,
                            "pattern": r"^(?!schedule:)[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$",
                        },
                    }
                )
            if route.path in QUERIES and method == "get":
                params += [
                    {"name": n, "in": "query", "required": False, "schema": check.schema}
                    for n, check in QUERIES[route.path].items()
                ]
            operation: dict[str, Any] = {
                "summary": op.summary,
                "operationId": f"{method}_{route.resource}_{route.suffix or 'collection'}",
                "parameters": params,
                "responses": _responses(op),
            }
            if op.scope:
                operation["security"] = [{"bearer": []}]
                operation["x-orbit-scope"] = op.scope
            else:
                operation["security"] = []
            if op.body is not None:
                operation["requestBody"] = {
                    # An empty body reads as {}: it may be left out when {} is valid.
                    "required": bool(
                        op.body.schema.get("required") or op.body.schema.get("minProperties")
                    ),
                    "content": {"application/json": {"schema": op.body.schema}},
                }
            if QUERIES.get(route.path) is tasks.PAGE_QUERY:
                operation["responses"]["200"] = {
                    **operation["responses"]["200"],
                    "headers": {
                        "Link": {
                            "description": "The next page, when there is one: "
                            '<PATH?cursor=N&limit=L>; rel="next"',
                            "schema": {"type": "string"},
                        }
                    },
                }
            item[method] = operation
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Orbit",
            "version": "1",
            "description": "Task platform with keyed concurrency and fencing tokens.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Envelope": {
                    "type": "object",
                    "required": ["data", "request_id"],
                    "properties": {"data": {}, "request_id": {"type": "string"}},
                },
                "BatchEnvelope": {
                    "type": "object",
                    "required": ["data", "request_id"],
                    "properties": {
                        "data": {
                            "type": "object",
                            "required": ["results"],
                            "properties": {
                                "results": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["status"],
                                        "properties": {
                                            "status": {"type": "integer"},
                                            "data": {},
                                            "error": {"$ref": "#/components/schemas/ErrorBody"},
                                        },
                                    },
                                }
                            },
                        },
                        "request_id": {"type": "string"},
                    },
                },
                "ErrorBody": {
                    "type": "object",
                    "required": ["code", "message", "details"],
                    "properties": {
                        "code": {"type": "string", "enum": ERROR_CODES},
                        "message": {"type": "string"},
                        "details": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "field": {"type": "string"},
                                    "message": {"type": "string"},
                                },
                            },
                        },
                    },
                },
                "Error": {
                    "type": "object",
                    "required": ["error", "request_id"],
                    "properties": {
                        "error": {"$ref": "#/components/schemas/ErrorBody"},
                        "request_id": {"type": "string"},
                    },
                },
            },
        },
    }


def _responses(op) -> dict[str, Any]:
    error = {
        "description": "Error",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if op.response == "Text":
        ok = {
            "description": "Prometheus text",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    elif op.response == "Raw":
        ok = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
    else:
        ok = {
            "description": "OK",
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{op.response}"}}
            },
        }
    responses = {str(op.status): ok, "default": error}
    if op.status == 201:
        responses["200"] = ok  # idempotent replay of a submission
    return responses
