"""Every Python block and every ``curl`` block of README.md and docs/ runs against a real
`orbit` server, so an example cannot drift from the API.

Each page gets a tenant of its own, and its blocks run in the page's order, each as a program
of its own, with the environment a reader following the page would have: ``ORBIT_URL``,
``ORBIT_TOKEN``, ``ORBIT_CREDENTIALS_FILE``, ``ORBIT_NAMESPACE``, ``QUEUE_ID`` and
``RESOURCE_DSN`` (a database of the reader's own, for the fenced store). A block must exit 0
within a minute; ``curl`` fails on an answer that is not 2xx (``--fail-with-body``).

A marker on the line before a block changes how it runs:

* ``<!-- example: runs until stopped -->``: a worker; it is started, the page's tasks must
  all finish before the next block runs, and at the end of the page it is sent SIGTERM and
  must exit 0 (drained);
* ``<!-- example: not run (REASON) -->``: left out, for the reason given, which may not be empty.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- example: (runs until stopped|not run \((.*)\)) -->$")
CURL = 'set -euo pipefail\ncurl() { command curl -sS --fail-with-body --max-time 30 "$@"; echo; }\n'


@dataclass
class Block:
    page: str
    line: int
    language: str
    code: str
    marker: str | None

    @property
    def runs(self) -> bool:
        return self.language == "python" or (
            self.language in ("sh", "bash", "console") and "curl " in self.code
        )


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a page, with the marker on the line before each."""
    out, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened and opened.group(1):
            start, body = i, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            above = next((x for x in reversed(lines[:start]) if x.strip()), "")
            marker = MARKER.match(above.strip())
            out.append(
                Block(
                    path.name,
                    start + 1,
                    opened.group(1),
                    "\n".join(body) + "\n",
                    marker.group(1) if marker else None,
                )
            )
        i += 1
    return out


def _unfinished(database, namespace_id: int) -> int:
    return database.query(
        "SELECT COUNT(*) AS n FROM tasks WHERE namespace_id = %s AND finished_at IS NULL "
        "AND state <> 'NEEDS_REVIEW'",
        (namespace_id,),
    )[0]["n"]


def _run(block: Block, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    if block.language == "python":
        command = [sys.executable, "-c", block.code]
    else:
        command = ["bash", "-c", CURL + block.code]
    return subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


@pytest.fixture(scope="module")
def resource_dsn(server):
    name = "doc_resources"
    server.create_database(name)
    yield server.dsn(name)
    server.drop_database(name)


def test_markers_say_why_a_block_is_not_run():
    for path in PAGES:
        for block in blocks(path):
            if block.marker and block.marker.startswith("not run"):
                assert re.fullmatch(r"not run \(.{8,}\)", block.marker), (block.page, block.line)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(b.runs for b in blocks(p))], ids=lambda p: p.name
)
def test_the_page_examples_run(
    page, orbit_server, database, tenant_factory, resource_dsn, tmp_path
):
    runnable = [b for b in blocks(page) if b.runs]
    tenant = tenant_factory()
    credentials = next(tmp_path.glob("cred-*.json"))
    env = dict(
        os.environ,
        ORBIT_URL=orbit_server,
        ORBIT_TOKEN=tenant.token,
        ORBIT_CREDENTIALS_FILE=str(credentials),
        ORBIT_NAMESPACE=tenant.namespace,
        QUEUE_ID=tenant.queue_id,
        RESOURCE_DSN=resource_dsn,
        PYTHONPATH=str(ROOT),
    )
    background: list[tuple[Block, subprocess.Popen]] = []
    try:
        for block in runnable:
            where = f"{block.page}:{block.line}"
            if block.marker and block.marker.startswith("not run"):
                continue
            proc = _run(block, env, tmp_path)
            if block.marker == "runs until stopped":
                background.append((block, proc))
                deadline = time.monotonic() + 60
                while _unfinished(database, tenant.namespace_id) and time.monotonic() < deadline:
                    assert proc.poll() is None, f"{where} exited: {proc.stdout.read()}"
                    time.sleep(0.1)
                assert _unfinished(database, tenant.namespace_id) == 0, f"{where}: tasks left"
                continue
            try:
                out, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                pytest.fail(f"{where} did not finish in 60 s:\n{out}")
            assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{out}"
    finally:
        for block, proc in background:
            proc.send_signal(signal.SIGTERM)
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            assert proc.returncode == 0, (
                f"{block.page}:{block.line} stopped {proc.returncode}:\n{out}"
            )
