# Sourced by scripts/scenario and scripts/test: a project virtualenv with Orbit installed.
# Works on a fresh Debian with Python 3.11: installs python3-venv with apt when it is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "orbit: Python 3.11+ is required (found $("$PY" --version 2>&1))" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv >/dev/null 2>&1; then
    rm -rf .venv
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >&2
      "$PY" -m venv .venv
    else
      echo "orbit: cannot create a virtualenv; install python3-venv" >&2; exit 1
    fi
  fi
fi
# shellcheck disable=SC1091
. .venv/bin/activate
STAMP=.venv/.orbit-installed
if [ ! -f "$STAMP" ] || [ setup.cfg -nt "$STAMP" ]; then
  python -m pip install -q --upgrade pip >&2
  python -m pip install -q -e '.[test,lint]' >&2
  touch "$STAMP"
fi
