"""The docs describe the product as it is: the README stays short, the benchmark page shows
the present and no clock times, and docs/operations.md lists what `orbit --help` and each
command's ``--help`` list, with the same defaults; the route table of docs/api.md is the
server's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from orbit_shell.server.routes import ROUTES

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
CLIS = {"orbit-admin": "orbit_shell.cli.admin", "orbit-migrate": "orbit_shell.cli.migrate"}


def _help(module: str, *args: str) -> str:
    code = f"import sys; from {module} import main; sys.exit(main())"
    out = subprocess.run(
        [sys.executable, "-c", code, *args, "--help"], capture_output=True, text=True, check=True
    )
    return out.stdout


def _subcommands(module: str) -> list[str]:
    return re.search(r"\{([a-z,-]+)\}", _help(module)).group(1).split(",")


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(--[a-z][a-z-]*)", text)) - {"--help"}


def _documented(command: str) -> str:
    """The lines of operations.md's command block that run ``command`` (continuations
    joined)."""
    block = OPERATIONS.split("## Commands", 1)[1].split("```", 2)[1]
    lines = block.replace("\\\n", " ").splitlines()
    return "\n".join(x for x in lines if re.match(rf"{re.escape(command)}( |$)", x))


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_bench_readme_is_short_and_has_no_clock_times():
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert re.findall(r"\b\d{1,2}:\d{2}\b", text) == []


def test_every_orbit_setting_is_documented_with_its_default():
    text = _help("orbit_shell.cli.server")
    settings = {}
    for line in text.split("environment:", 1)[1].splitlines():
        if m := re.match(r"\s+(ORBIT_\w+)\s+(.*?)(?: \(default ([^)]*)\))?$", line):
            settings[m.group(1)] = m.group(3)
    rows = dict(re.findall(r"^\| `(ORBIT_\w+)` \| `?([^|`]*)`? \|", OPERATIONS, re.M))
    assert settings.keys() == rows.keys()
    for name, default in settings.items():
        assert rows[name] == (default or "unset"), name


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_every_subcommand_and_flag_is_documented(cli):
    module = CLIS[cli]
    for sub in _subcommands(module):
        documented = _documented(f"{cli} {sub}")
        assert documented, f"{cli} {sub} is not in docs/operations.md"
        assert _flags(_help(module, sub)) == _flags(documented), f"{cli} {sub}"
    named = set(re.findall(rf"^{cli} ([a-z-]+)", _documented(cli), re.M))
    assert named == set(_subcommands(module))


def test_orbit_worker_flags_are_documented():
    assert _flags(_help("orbit_shell.cli.worker")) == _flags(_documented("orbit-worker"))


def test_the_api_page_lists_every_route():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([A-Z]+ /v1/[^`]*)` \|", page, re.M))
    served = {
        f"{method.upper()} {r.path}"
        for r in ROUTES
        for method in r.ops
        if r.path.startswith("/v1/") and r.path != "/v1/openapi.json"
    }
    assert listed == served


def test_links_between_pages_resolve():
    broken = []
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []
