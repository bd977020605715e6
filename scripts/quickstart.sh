#!/usr/bin/env bash
# Sets up .venv with rlix and its simulator, then runs the main job: every policy on the bundled
# agentic-4x32 scenario (4 RL pipelines sharing 32 simulated H100s), one table and a plot.
# Re-running skips the install when pyproject.toml and the compiled engines' sources are
# unchanged. Extra arguments go to `rlix-sim compare` (e.g. --policies rlix,static).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.rlix-quickstart-install
# The install builds the compiled engines too: their sources count.
want="$(cat pyproject.toml setup.py rlix/sim/_engine*.p* | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[sim]'
  echo "$want" > "$stamp"
fi
exec .venv/bin/rlix-sim compare agentic-4x32 "$@"
