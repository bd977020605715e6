#!/usr/bin/env bash
# Sets up .venv with rlix and runs the main job on a bundled scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[sim]'
exec .venv/bin/rlix-sim demo "$@"
