#!/usr/bin/env bash
# Sets up a fresh virtualenv (.venv) with rlix and its dev tools, then runs lint, types and
# the whole test suite. Works on a fresh machine with Python 3.11 and pip; used by CI as is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
echo "== ruff"; .venv/bin/ruff check rlix tests bench
echo "== mypy (rlix/policy)"; .venv/bin/mypy
echo "== pytest"
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
