"""The notebooks: stored without outputs, parameterised, and they run (small) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["utilization_study", "trace_explorer"]


@pytest.mark.parametrize("name", NAMES)
def test_stored_without_outputs_and_with_a_parameters_cell(name: str) -> None:
    book = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    code = [c for c in book["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code), name
    assert "parameters" in code[0]["metadata"].get("tags", []), "papermill injects after the first code cell"


def _run(name: str, tmp_path: Path, **parameters: object) -> list[dict[str, object]]:
    papermill = pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(out), parameters=parameters,
                               progress_bar=False, kernel_name="python3", cwd=str(tmp_path))
    cells = json.loads(out.read_text())["cells"]
    return [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]


def _images(outputs: list[dict[str, object]]) -> int:
    return sum(1 for o in outputs if "image/png" in o.get("data", {}))  # type: ignore[operator]


def test_the_utilization_study_runs_a_small_sweep(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    outputs = _run("utilization_study", tmp_path, scenarios=["tiny"], policies=["rlix", "static"], seeds=[0],
                   max_time_s=150, workers=1, out=str(tmp_path / "study"))
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _images(outputs) == 5  # shares, steps per GPU-hour, JCT CDF, GPU use for each policy
    points = sorted(p.name for p in (tmp_path / "study" / "tiny" / "runs").iterdir())
    assert len(points) == 2 and (tmp_path / "study" / "tiny" / "results.parquet").exists()


def test_the_trace_explorer_reads_a_file_through_a_column_map(tmp_path: Path) -> None:
    import pandas as pd

    from rlix.traces import load_bundled

    mine = load_bundled("math_small").rename(columns={"response_tokens": "resp_len"})
    mine.to_csv(tmp_path / "mine.csv", index=False)
    outputs = _run("trace_explorer", tmp_path, trace=str(tmp_path / "mine.csv"),
                   column_map={"response_tokens": "resp_len"})
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _images(outputs) == 3
    text = "".join(str(o.get("text", "")) for o in outputs)
    lengths = pd.read_csv(tmp_path / "mine.csv")["resp_len"]
    assert f"{len(lengths)} samples, mean {lengths.mean():.0f} tokens" in text
