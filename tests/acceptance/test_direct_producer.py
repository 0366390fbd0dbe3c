"""The direct producer (W9 for submissions): the SDK submits over MySQL with the account from
``orbit-admin producer-account``, and every submission is answered as ``POST /v1/tasks`` and
``POST /v1/tasks/batch`` answer it, compared item by item with the HTTP route; the account
submits to its own namespace and does nothing else (L4)."""

from __future__ import annotations

import json
import secrets
from urllib.parse import urlparse

import pymysql
import pytest

from orbit_shell.cli.admin import PRODUCER_PROCEDURES
from orbit_shell.engine import db, schema
from orbit_shell.engine.schema import SchemaMismatch, routine_name
from orbit_shell.sdk.client import Client
from orbit_shell.sdk.models import ApiError, NotFoundError, SubmitReceipt, SubmitTaskRequest
from orbit_shell.sdk.producer import SUBMIT_PROTOCOL, DirectProducer
from tests.conftest import make_tenant
from tests.engine import submit_args, submit_item
from tests.helpers import account_dsn, answer_protocol


@pytest.fixture
def producer_dsn(orbit_dsn, server, tenant, tmp_path):
    name = "orbit_producer_" + secrets.token_hex(3)
    out = tmp_path / "producer.json"
    return account_dsn(orbit_dsn, server, name, out, tenant, PRODUCER_PROCEDURES)


@pytest.fixture
def direct(producer_dsn, tenant):
    producer = DirectProducer(producer_dsn, tenant.application, "test", tenant.namespace)
    yield producer
    producer.close()


@pytest.fixture
def api(orbit_server, tenant):
    client = Client(orbit_server, tenant.token)
    yield client
    client.close()


def _request(queue_id: str, **fields) -> SubmitTaskRequest:
    base = dict(handler="job", handler_version="v1", payload_version="v1", payload={"n": 1})
    base.update(fields)
    return SubmitTaskRequest(queue_id=queue_id, **base)


def _answer(submit, key: str, request: SubmitTaskRequest):
    """What a path answers, without what differs by nature (ids, times): the created flag and
    the task's fields, or the error's class, code and details."""
    try:
        made = submit(key, request)
    except ApiError as exc:
        return (type(exc).__name__, exc.code, exc.details)
    task = {
        k: v
        for k, v in made.task.raw.items()
        if k
        not in ("task_id", "created_at", "updated_at", "available_at", "deadline_at", "finished_at")
    }
    return (made.created, task)


def test_w9_each_submission_is_answered_as_the_route_answers_it(api, direct, tenant):
    q = tenant.queue_id
    cases = [
        _request(q),
        _request(q, concurrency_key="acct/1", business_key="order-1", priority=2),
        _request(q, concurrency_key="acct/1", if_busy="skip"),  # busy: both end KEY_BUSY
        _request(q, if_busy="never"),
        _request(q, max_attempts=5, deadline_seconds=60, payload={"nested": [1, {"a": None}]}),
        _request(q, handler=""),
        _request(q, priority=10),
        _request(q, concurrency_key="x" * 192),
        _request(q, payload="y" * (1024 * 1024)),
        _request(q, max_attempts=0),
        _request("0" * 32),
        _request("not-a-queue"),
    ]
    for request in cases:
        suffix = secrets.token_hex(4)
        over_http = _answer(api.submit_task, f"http-{suffix}", request)
        over_mysql = _answer(direct.submit_task, f"direct-{suffix}", request)
        assert over_http == over_mysql, request
    for key in ("", " padded ", "k" * 256, "bad\nkey"):
        assert _answer(api.submit_task, key, cases[0]) == _answer(direct.submit_task, key, cases[0])


def test_w9_either_path_replays_the_others_submission(api, direct, tenant):
    request = _request(tenant.queue_id, concurrency_key="replay")
    first = api.submit_task("across-1", request)
    again = direct.submit_task("across-1", request)
    assert (again.created, again.task.task_id) == (False, first.task.task_id)
    second = direct.submit_task("across-2", request)
    back = api.submit_task("across-2", request)
    assert (second.created, back.created, back.task.task_id) == (True, False, second.task.task_id)
    changed = _request(tenant.queue_id, concurrency_key="other")
    assert _answer(api.submit_task, "across-1", changed) == _answer(
        direct.submit_task, "across-1", changed
    )
    assert _answer(direct.submit_task, "across-1", changed)[1] == "IDEMPOTENCY_CONFLICT"


def test_w9_quotas_hold_on_the_direct_path(api, direct, tenant, database):
    queue = api.create_queue("limited-" + secrets.token_hex(3), max_unfinished=1).queue_id
    api.submit_task("quota-1", _request(queue))
    over_http = _answer(api.submit_task, "quota-2", _request(queue))
    over_mysql = _answer(direct.submit_task, "quota-3", _request(queue))
    assert over_http == over_mysql and over_mysql[1] == "QUOTA_EXCEEDED"


def test_w9_a_batch_is_answered_item_by_item_as_the_route_answers(api, direct, tenant):
    q = tenant.queue_id
    api.submit_task("batch-taken", _request(q))

    def items(tag: str):
        return [
            (f"{tag}-a", _request(q)),
            (f"{tag}-b", _request(q, concurrency_key="batch/1")),
            (f"{tag}-c", _request("0" * 32)),  # no such queue: that item's error
            ("batch-taken", _request(q, handler="changed")),  # the key's other content
            ("batch-taken", _request(q)),  # a replay
        ]

    def shape(answers):
        return [
            ("receipt", a.created)
            if isinstance(a, SubmitReceipt)
            else (type(a).__name__, a.code, a.details)
            for a in answers
        ]

    assert shape(api.submit_tasks(items("h"))) == shape(direct.submit_tasks(items("d")))
    too_many = [(f"many-{i}", _request(q)) for i in range(101)]
    assert _answer(lambda *_: api.submit_tasks(too_many), "", None) == _answer(
        lambda *_: direct.submit_tasks(too_many), "", None
    )


def test_w9_the_account_records_itself_and_submits_to_its_namespace_only(
    orbit_dsn, server, producer_dsn, direct, api, tenant, database, tmp_path
):
    made = direct.submit_task("who", _request(tenant.queue_id)).task.task_id
    [row] = database.query(
        "SELECT h.actor FROM task_history h JOIN tasks t ON t.id = h.task_id "
        "WHERE t.public_id = %s",
        (made,),
    )
    assert row["actor"] == "account:" + urlparse(producer_dsn).username
    other = make_tenant(database, tmp_path)
    with pytest.raises(NotFoundError):  # another tenant's names are not found
        DirectProducer(producer_dsn, other.application, "test", other.namespace)
    with pytest.raises(NotFoundError):  # nor its queues, through the producer's namespace
        direct.submit_task("theirs", _request(other.queue_id))
    conn = db.connect(producer_dsn)
    try:
        with conn.cursor() as cur:
            with pytest.raises(pymysql.MySQLError, match="NOT_FOUND"):  # its namespace id
                cur.execute(
                    f"CALL {routine_name('producer_queue')}(%s, %s)",
                    (other.namespace_id, other.queue_id),
                )
            for denied in (
                "SELECT * FROM tasks LIMIT 1",
                f"CALL {routine_name('worker_claim')}(1, 'x', 1, 0)",
            ):
                with pytest.raises(pymysql.MySQLError, match="denied"):
                    cur.execute(denied)
            # Submit into the other's namespace and queue, by their real ids: only the account
            # check can refuse it.
            [theirs] = database.query(
                "SELECT id FROM queues WHERE public_id = %s", (other.queue_id,)
            )
            with pytest.raises(pymysql.MySQLError, match="NOT_FOUND: namespace not found"):
                cur.execute(
                    f"CALL {routine_name('task_submit')}({', '.join(['%s'] * 20)})",
                    submit_args(other.namespace_id, theirs["id"], "theirs-direct"),
                )
            with pytest.raises(pymysql.MySQLError, match="NOT_FOUND: namespace not found"):
                cur.execute(
                    f"CALL {routine_name('task_submit_many')}(%s, 'x', %s)",
                    (other.namespace_id, json.dumps([submit_item(theirs["id"])])),
                )
    finally:
        conn.close()
    [count] = database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s", (other.namespace_id,)
    )
    assert count["n"] == 0  # nothing reached the other's namespace


@pytest.mark.parametrize(
    "protocol, says",
    [
        (None, "older than this producer (protocol 0, this producer speaks 2); run `orbit-migrate"),
        (SUBMIT_PROTOCOL - 1, "older than this producer (protocol 1, this producer speaks 2)"),
        (SUBMIT_PROTOCOL + 1, "newer than this producer (protocol 3, this producer speaks 2)"),
    ],
)
def test_w9_the_producer_refuses_submission_procedures_of_another_protocol(
    fresh_dsn, tmp_path, protocol, says
):
    """K11 for producers: a direct producer whose database runs other submission procedures
    is refused when it connects, as a direct worker is, not at its first submission. ``None``
    is a database from before worker_namespace answered the number."""
    schema.apply(fresh_dsn)
    database = db.Database(fresh_dsn, pool_size=1)
    tenant = make_tenant(database, tmp_path)
    DirectProducer(fresh_dsn, tenant.application, "test", tenant.namespace).close()
    answer_protocol(fresh_dsn, "submit_protocol", protocol)
    with pytest.raises(SchemaMismatch) as info:
        DirectProducer(fresh_dsn, tenant.application, "test", tenant.namespace)
    assert says in str(info.value)
    database.close()
