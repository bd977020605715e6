"""scripts/quickstart.sh and scripts/test.sh (CI's) refuse a Python older than rlix needs in one
line, before they make or install into a virtualenv: a .venv made by an older Python, or left
without pip by a failed venv, is never reused to fail in pip again.

Each script runs in a copy of scripts/ (it works from the folder above its own), with a
stand-in interpreter that reports Python 3.10 and logs every call but the version checks."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPTS = ["scripts/quickstart.sh", "scripts/test.sh"]


def _old_python(path: Path) -> Path:
    """An interpreter that answers `-c CODE` as Python 3.10 would and logs anything else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-c" ]; then\n'
        f'  exec "{sys.executable}" -c "import sys; sys.version_info = (3, 10, 13, \'final\', 0); exec(sys.argv[1])" "$2"\n'
        "fi\n"
        f'echo "$*" >> "{path.parent}/calls"\n'
        "exit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _run(script: str, root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (root / "scripts").mkdir(exist_ok=True)
    (root / "rlix" / "sim").mkdir(parents=True, exist_ok=True)
    for source in ("pyproject.toml", "setup.py", "rlix/sim/_engine.pyx"):  # the install stamp's
        (root / source).touch()
    for name in ("quickstart.sh", "test.sh", "venv.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    return subprocess.run(["bash", str(root / script)], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_venv_of_an_older_python_is_named_not_installed_into(script: str, tmp_path: Path) -> None:
    venv_python = _old_python(tmp_path / ".venv" / "bin" / "python")
    done = _run(script, tmp_path, PYTHON=sys.executable)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"{script}: .venv has Python 3.10 and rlix needs 3.11 or newer: remove .venv and run "
        "again with PYTHON=python3.11 (or newer)"]
    assert not (venv_python.parent / "calls").exists()  # no pip, no venv module
    assert not list((tmp_path / ".venv").glob(".rlix-*-install"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_older_python_makes_no_venv(script: str, tmp_path: Path) -> None:
    python = _old_python(tmp_path / "bin" / "python3.10")
    done = _run(script, tmp_path, PYTHON=str(python))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{script}: {python} is Python 3.10 and rlix needs 3.11 or newer: run again with "
        "PYTHON=python3.11 (or newer)"]
    assert not (tmp_path / ".venv").exists()
    assert not (python.parent / "calls").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_missing_python_is_one_line(script: str, tmp_path: Path) -> None:
    done = _run(script, tmp_path, PYTHON="no-such-python3")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{script}: no no-such-python3 on PATH: rlix needs Python 3.11 or newer "
        f"(PYTHON=python3.11 bash {script})"]
    assert not (tmp_path / ".venv").exists()


def _python_without_venv(path: Path) -> Path:
    """An interpreter of the running version whose `-m venv DIR` fails as Debian's python3
    does without python3-venv: DIR/bin/python made (with no pip), then exit 1."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-c" ]; then exec "' + sys.executable + '" "$@"; fi\n'
        'if [ "$1 $2" = "-m venv" ]; then\n'
        '  mkdir -p "$3/bin"\n'
        "  printf '#!/bin/sh\\n"
        'if [ \"$1\" = \"-c\" ]; then exec \"' + sys.executable + '\" \"$@\"; fi\\n'
        "echo \"$*\" >> \"$(dirname \"$0\")/../../calls\"\\nexit 1\\n' > \"$3/bin/python\"\n"
        '  chmod +x "$3/bin/python"\n'
        "  echo 'The virtual environment was not created successfully because ensurepip is not available.' >&2\n"
        "  exit 1\n"
        "fi\n"
        "exit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_failed_venv_leaves_no_venv_behind(script: str, tmp_path: Path) -> None:
    python = _python_without_venv(tmp_path / "bin" / "python3")
    done = _run(script, tmp_path, PYTHON=str(python))
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"{script}: {python} -m venv failed (above; on Debian or Ubuntu: apt-get install "
        "python3-venv): run again once it works")
    assert not (tmp_path / ".venv").exists()
    assert not (tmp_path / "calls").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_venv_without_pip_is_named_not_installed_into(script: str, tmp_path: Path) -> None:
    python = _python_without_venv(tmp_path / "bin" / "python3")
    subprocess.run([str(python), "-m", "venv", str(tmp_path / ".venv")], capture_output=True)  # as before the fix
    assert (tmp_path / ".venv" / "bin" / "python").exists()
    done = _run(script, tmp_path, PYTHON=str(python))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"{script}: .venv has no pip (a venv that failed, e.g. without Debian's python3-venv): "
        "remove .venv and run again"]
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    assert calls == ["-m pip --version"]  # asked, never installed with
