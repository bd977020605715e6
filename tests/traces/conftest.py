"""Shared fixtures for the rlix.traces tests: the Azure log, small traces, a runner for the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.sim.cli import main

# ../shared next to the repository (see /work/shared/traces/README.md).
AZURE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "azure_conv_2023.csv"
AZURE_MAP = ["response_tokens=num_decode_tokens", "prompt_tokens=num_prefill_tokens"]


@pytest.fixture
def azure_path() -> Path:
    if not AZURE.is_file():
        pytest.skip(f"Azure 2023 trace not found at {AZURE} (it lives in ../shared/traces)")
    return AZURE


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run `rlix-sim ARGS...` in-process; return (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
