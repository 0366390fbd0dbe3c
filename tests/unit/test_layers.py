"""The package's layers import one way: cli -> server / sdk -> engine -> errors, validation;
no two modules import each other, even through others or inside a function; and no module
is 500 lines or more. A worker that imports the SDK does not load the HTTP server (Falcon,
gunicorn)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orbit_shell"
RANK = {"shared": 0, "engine": 1, "sdk": 2, "server": 2, "cli": 3}
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    return {
        ".".join(("orbit_shell", *p.relative_to(PACKAGE).with_suffix("").parts)): p
        for p in PACKAGE.rglob("*.py")
    }


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it (``from a import b`` is module
    ``a.b`` when that is a module, else ``a``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("orbit_shell"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                out.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
    return out


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


def test_no_import_circle():
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    circles = []

    def visit(module: str, path: list[str], done: set[str]) -> None:
        for nxt in sorted(graph.get(module, ())):
            if nxt in path:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in done:
                visit(nxt, [*path, nxt], done)
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module], done)
    assert circles == []


def test_modules_stay_under_500_lines():
    long = {
        m: n
        for m, p in _modules().items()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_LINES
    }
    assert long == {}
