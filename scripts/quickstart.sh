#!/usr/bin/env bash
# Sets up .venv with rlix and its simulator, then runs the main job: every policy on the bundled
# agentic-4x32 scenario (4 RL pipelines sharing 32 simulated H100s): a table of the policies, one
# of their pipelines, and two plots (runs/agentic-4x32/compare/).
# Re-running skips the install when pyproject.toml and the compiled engines' sources are
# unchanged. Extra arguments go to `rlix-sim compare` (e.g. --policies rlix,static).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# rlix needs Python 3.11 or newer (pyproject's requires-python). Checked here, in one line, not
# left to pip: a .venv made by an older Python would otherwise be reused on every later run,
# whatever PYTHON says, each failing the same way.
version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "?"; }
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
if [ -x .venv/bin/python ]; then
  if ! new_enough .venv/bin/python; then
    echo "quickstart: .venv has Python $(version .venv/bin/python) and rlix needs 3.11 or newer: remove .venv and run again with PYTHON=python3.11 (or newer)" >&2
    exit 2
  fi
else
  if ! command -v "$PY" >/dev/null 2>&1; then
    echo "quickstart: no $PY on PATH: rlix needs Python 3.11 or newer (PYTHON=python3.11 bash scripts/quickstart.sh)" >&2
    exit 2
  fi
  if ! new_enough "$PY"; then
    echo "quickstart: $PY is Python $(version "$PY") and rlix needs 3.11 or newer: run again with PYTHON=python3.11 (or newer)" >&2
    exit 2
  fi
  # A venv that fails (Debian's python3 without python3-venv has no ensurepip) still leaves
  # .venv/bin/python, which every later run would take for a made .venv: it goes again.
  [ -e .venv ] && made_here= || made_here=1
  if ! "$PY" -m venv .venv; then
    [ -z "$made_here" ] || rm -rf .venv
    echo "quickstart: $PY -m venv failed (above; on Debian or Ubuntu: apt-get install python3-venv): run again once it works" >&2
    exit 2
  fi
fi
stamp=.venv/.rlix-quickstart-install
# The install builds the compiled engines too: their sources count.
want="$(cat pyproject.toml setup.py rlix/sim/_engine*.p* | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    echo "quickstart: .venv has no pip (a venv that failed, e.g. without Debian's python3-venv): remove .venv and run again" >&2
    exit 2
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[sim]'
  echo "$want" > "$stamp"
fi
exec .venv/bin/rlix-sim compare agentic-4x32 "$@"
