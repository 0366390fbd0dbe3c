"""``GET /v1/openapi.json`` as the tools users feed it to read it: it validates as OpenAPI 3.0
(openapi-spec-validator), and a client generated from it (openapi-python-client) submits a
task and reads a typed error. The document failed both: ``"required": []`` in eight request
bodies, an error body's array without ``items``, and a time zone enum two of whose names
one identifier stands for."""

from __future__ import annotations

import importlib
import json
import os
import secrets
import subprocess
import sys
import urllib.request

from openapi_spec_validator import OpenAPIV30SpecValidator

from tests.helpers import task_body


def _document(url: str) -> dict:
    with urllib.request.urlopen(url + "/v1/openapi.json", timeout=10) as answer:
        return json.loads(answer.read())


def test_the_api_description_is_valid_openapi_3_0(orbit_server):
    errors = [e.message for e in OpenAPIV30SpecValidator(_document(orbit_server)).iter_errors()]
    assert errors == []


def test_a_generated_client_submits_a_task_and_reads_a_typed_error(
    orbit_server, tenant, tmp_path, monkeypatch
):
    doc = tmp_path / "openapi.json"
    doc.write_text(json.dumps(_document(orbit_server)))
    generator = os.path.join(os.path.dirname(sys.executable), "openapi-python-client")
    made = subprocess.run(
        [generator, "generate", "--path", str(doc), "--output-path", str(tmp_path / "orbit_api")]
        + ["--meta", "none"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "warning" not in (made.stdout + made.stderr).lower(), made.stdout + made.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    api = importlib.import_module("orbit_api")
    submit = importlib.import_module("orbit_api.api.default.post_tasks_collection")
    models = importlib.import_module("orbit_api.models")
    with api.AuthenticatedClient(base_url=orbit_server, token=tenant.token) as client:
        body = models.PostTasksCollectionBody.from_dict(task_body(tenant.queue_id))
        idem = secrets.token_hex(8)
        done = submit.sync_detailed(client=client, body=body, idempotency_key=idem)
        assert done.status_code == 201, done.content
        assert isinstance(done.parsed, models.Envelope)
        assert done.parsed.data["state"] == "WAITING"
        bad = models.PostTasksCollectionBody.from_dict(task_body(tenant.queue_id, priority=99))
        idem = secrets.token_hex(8)
        refused = submit.sync_detailed(client=client, body=bad, idempotency_key=idem)
    assert refused.status_code == 400
    assert isinstance(refused.parsed, models.Error)
    assert refused.parsed.error.code.value == "INVALID_ARGUMENT"
    assert refused.parsed.error.details[0].field == "priority"
