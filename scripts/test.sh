#!/usr/bin/env bash
# Sets up a virtualenv (.venv) with rlix, the simulator, the CPU executor and the dev tools,
# then runs lint, types and the whole test suite. Works on a fresh machine with Python 3.11
# and pip (and a C compiler: the simulator's engines are compiled); used by CI as is. Re-running
# skips the install when pyproject.toml and the compiled engines' sources are unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SCRIPT=scripts/test.sh
source scripts/venv.sh
make_venv
stamp=.venv/.rlix-test-install
want="$(install_stamp)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  check_venv_pip
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first and pinned: the CPU build; an unpinned torch pulls a multi-GB CUDA build.
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -e '.[dev,sim,exec]'
  echo "$want" > "$stamp"
fi
echo "== ruff"; .venv/bin/ruff check rlix tests bench notebooks
echo "== mypy (rlix, strict)"; .venv/bin/mypy
echo "== pytest"
set +e
# Two workers: the tests that start Ray on one, the rest beside them (tests/conftest.py).
.venv/bin/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
