"""The package's layers import one way: cli -> server / sdk -> engine -> errors, validation.
A worker that imports the SDK does not load the HTTP server (Falcon, gunicorn)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orbit_shell"
RANK = {"shared": 0, "engine": 1, "sdk": 2, "server": 2, "cli": 3}


def _layer(module: str) -> str:
    part = module.split(".")[1] if module.count(".") else ""
    return part if part in RANK else "shared"


def test_imports_run_downward_only():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(("orbit_shell", *path.relative_to(PACKAGE).with_suffix("").parts))
        mine = _layer(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orbit_shell"):
                theirs = _layer(node.module)
                if theirs != mine and RANK[theirs] >= RANK[mine]:
                    wrong.append(f"{module} imports {node.module}")
    assert wrong == []


def test_the_sdk_loads_without_the_server():
    code = (
        "import sys, orbit_shell.sdk.worker, orbit_shell.sdk.transport, orbit_shell.sdk.fence; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('falcon', 'gunicorn') "
        "or m.startswith('orbit_shell.server')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
