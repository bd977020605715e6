# Sourced by scripts/quickstart.sh and scripts/test.sh (never run alone): makes .venv with a
# Python new enough for rlix, or says in one line why it cannot, so that neither script leaves a
# .venv that every later run would take for a made one and fail in the same way.
# Needs SCRIPT (the name its messages start with) and PY (the Python to make .venv with).

# rlix needs Python 3.11 or newer (pyproject's requires-python). Checked here, in one line, not
# left to pip: a .venv made by an older Python would otherwise be reused on every later run,
# whatever PYTHON says, each failing the same way.
venv_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo "?"; }
venv_new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

# Makes .venv unless it is there; exits 2 with one line when it cannot.
make_venv() {
  if [ -x .venv/bin/python ]; then
    if ! venv_new_enough .venv/bin/python; then
      echo "$SCRIPT: .venv has Python $(venv_version .venv/bin/python) and rlix needs 3.11 or newer: remove .venv and run again with PYTHON=python3.11 (or newer)" >&2
      exit 2
    fi
    return 0
  fi
  if ! command -v "$PY" >/dev/null 2>&1; then
    echo "$SCRIPT: no $PY on PATH: rlix needs Python 3.11 or newer (PYTHON=python3.11 bash $SCRIPT)" >&2
    exit 2
  fi
  if ! venv_new_enough "$PY"; then
    echo "$SCRIPT: $PY is Python $(venv_version "$PY") and rlix needs 3.11 or newer: run again with PYTHON=python3.11 (or newer)" >&2
    exit 2
  fi
  # A venv that fails (Debian's python3 without python3-venv has no ensurepip) still leaves
  # .venv/bin/python, which every later run would take for a made .venv: it goes again.
  local made_here
  [ -e .venv ] && made_here= || made_here=1
  if ! "$PY" -m venv .venv; then
    [ -z "$made_here" ] || rm -rf .venv
    echo "$SCRIPT: $PY -m venv failed (above; on Debian or Ubuntu: apt-get install python3-venv): run again once it works" >&2
    exit 2
  fi
}

# Before an install: a .venv without pip (left by a failed venv before this check) is named.
check_venv_pip() {
  if ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    echo "$SCRIPT: .venv has no pip (a venv that failed, e.g. without Debian's python3-venv): remove .venv and run again" >&2
    exit 2
  fi
}

# The install stamp: the install builds the compiled engines too, so their sources count.
install_stamp() { cat pyproject.toml setup.py rlix/sim/_engine*.p* | sha256sum | cut -c1-16; }
