#!/usr/bin/env bash
# Sets up .venv with rlix and its simulator, then runs the main job: every policy on the bundled
# agentic-4x32 scenario (4 RL pipelines sharing 32 simulated H100s): tables of the policies, one
# of their pipelines, and two plots (runs/agentic-4x32/compare/).
# Re-running skips the install when pyproject.toml and the compiled engines' sources are
# unchanged. Extra arguments go to `rlix-sim compare` (e.g. --policies rlix,static).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SCRIPT=scripts/quickstart.sh
source scripts/venv.sh
make_venv
stamp=.venv/.rlix-quickstart-install
want="$(install_stamp)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  check_venv_pip
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[sim]'
  echo "$want" > "$stamp"
fi
exec .venv/bin/rlix-sim compare agentic-4x32 "$@"
