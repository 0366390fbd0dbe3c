"""Keyed concurrency with fencing tokens, end to end (SPEC 7).

Creates two dedicated queues, submits one task to each with the same fresh concurrency key,
runs two SDK workers (capacity 4 each) whose handler writes through an in-memory fenced store,
checks through the attempts API that the tokens grew, replays the older token and shows the
store rejects it, then drains both workers. Reads ORBIT_URL and ORBIT_CREDENTIALS_FILE.

Normal output, exactly:

    queues=2 completed=2 tokens_increasing=true
    resource_writes=2 stale_write_rejected=true worker_drained=true

Every run makes its own queues, tasks and key and keeps the history. On failure it exits
non-zero; the whole run is bounded by 20 seconds, shutdown included.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid

from orbit_shell.sdk.client import Client
from orbit_shell.sdk.fence import InMemoryFencedStore, StaleTokenError
from orbit_shell.sdk.models import SubmitTaskRequest
from orbit_shell.sdk.protocol import TaskEvent
from orbit_shell.sdk.worker import Worker

TOTAL_SECONDS = 20.0


def main() -> int:
    started = time.monotonic()
    url = os.environ["ORBIT_URL"]
    with open(os.environ["ORBIT_CREDENTIALS_FILE"], encoding="utf-8") as handle:
        credentials = json.load(handle)
    namespace = credentials["namespace"]
    client = Client(url, credentials["token"], timeout=5)
    run = uuid.uuid4().hex[:12]
    key = f"example/object-{run}"
    store = InMemoryFencedStore(namespace)

    queues = [client.create_queue(f"keyed-example-{run}-{i}", lease_seconds=10) for i in (1, 2)]
    queue_ids = [q.queue_id for q in queues]

    def write_object(event: TaskEvent) -> dict:
        # The resource side decides with the token: check, raise, dedupe and write at once.
        result = store.write(
            namespace,
            event.task.concurrency_key,
            event.concurrency_token,
            operation_id=event.task.task_id,
            value=event.payload,
        )
        return {"token": str(result.token), "duplicate": result.duplicate}

    workers = []
    for i in (1, 2):
        worker = Worker(
            queue_ids,
            url=url,
            token=credentials["token"],
            capacity=4,
            worker_id=f"keyed-example-{run}-{i}",
            wait_ms=500,
            drain_timeout=5,
        )
        worker.register("object.update", "v1", write_object)
        workers.append(worker.start())

    task_ids = []
    for i, queue_id in enumerate(queue_ids, 1):
        accepted = client.submit_task(
            f"keyed-example-{run}-{i}",
            SubmitTaskRequest(
                queue_id=queue_id,
                handler="object.update",
                handler_version="v1",
                payload_version="v1",
                payload={"operation_ref": f"update-{i}", "object_ref": key},
                concurrency_key=key,
            ),
        )
        task_ids.append(accepted.task.task_id)

    deadline = started + TOTAL_SECONDS - 4  # keep time for a bounded shutdown
    states = {}
    while time.monotonic() < deadline:
        states = {t: client.get_task(t).state for t in task_ids}
        if all(s in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED") for s in states.values()):
            break
        time.sleep(0.1)
    completed = sum(1 for s in states.values() if s == "SUCCEEDED")

    grants = sorted(
        (
            (a.started_at or "", a.concurrency_token)
            for t in task_ids
            for a in client.list_attempts(t)
            if a.state == "SUCCEEDED"
        ),
    )
    tokens = [token for _, token in grants]
    increasing = (
        len(tokens) == 2 and all(isinstance(t, int) for t in tokens) and tokens[0] < tokens[1]
    )

    stale_rejected = False
    if tokens:
        try:
            store.write(namespace, key, tokens[0], operation_id=f"replay-{run}", value="late")
        except StaleTokenError:
            stale_rejected = True

    drained = all(
        w.drain(timeout=max(1.0, started + TOTAL_SECONDS - time.monotonic() - 1)) for w in workers
    )
    client.close()

    print(f"queues={len(queues)} completed={completed} tokens_increasing={str(increasing).lower()}")
    print(
        f"resource_writes={store.writes} stale_write_rejected={str(stale_rejected).lower()} "
        f"worker_drained={str(drained).lower()}"
    )
    ok = completed == 2 and increasing and store.writes == 2 and stale_rejected and drained
    return 0 if ok else 1


def _watchdog() -> None:
    """The 20 s limit holds even if something hangs: exit non-zero, no cleanup left running."""
    time.sleep(TOTAL_SECONDS)
    print("keyed_concurrency: gave up after 20 s", file=sys.stderr)
    os._exit(2)


if __name__ == "__main__":
    threading.Thread(target=_watchdog, daemon=True).start()
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 - the example's boundary: say why, exit non-zero
        print(f"keyed_concurrency: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
