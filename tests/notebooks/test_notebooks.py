"""The notebooks: stored without outputs, parameterised, and they run (small) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["utilization_study", "trace_explorer", "sim_vs_exec"]


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


def _first_error(name: str, tmp_path: Path, **parameters: object) -> str:
    """The notebook run with bad parameters: its first error, as `ename: evalue`."""
    papermill = pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    out = tmp_path / f"{name}.ipynb"
    with pytest.raises(papermill.PapermillExecutionError):
        papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(out), parameters=parameters,
                                   progress_bar=False, kernel_name="python3", cwd=str(tmp_path),
                                   execution_timeout=120)  # a parameter that hangs a cell fails the test
    errors = [o for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"
              for o in c["outputs"] if o["output_type"] == "error"]
    return f"{errors[0]['ename']}: {errors[0]['evalue']}"


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


def test_the_utilization_study_draws_its_figures_when_a_scenario_has_no_finished_run(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from importlib import resources

    import yaml

    tiny = yaml.safe_load(resources.files("rlix.scenarios").joinpath("data", "tiny.yaml").read_text())
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({**tiny, "trace": {"path": "bad.csv"}}))
    (tmp_path / "bad.csv").write_text("response_tokens\nabc\n")  # read by the run, which fails
    study = tmp_path / "study"
    outputs = _run("utilization_study", tmp_path, scenarios=["tiny", str(tmp_path / "broken.yaml")], policies=["rlix"],
                   seeds=[0], max_time_s=60, workers=1, out=str(study))
    assert sorted(p.name for p in study.iterdir()) == ["broken", "tiny"]  # a file's sweep under its stem, in out
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _images(outputs) == 4  # shares, steps per GPU-hour, JCT CDF, GPU use of tiny's one run
    text = "".join("".join(o["text"]) for o in outputs if o.get("name") == "stdout")  # type: ignore[arg-type]
    assert "1 point(s) failed:\n" in text and "'abc' is not a number" in text


def test_the_utilization_study_jct_curves_count_unfinished_jobs_and_keep_a_colour_per_policy(tmp_path: Path) -> None:
    """tiny cut at 100 s: under rlix one of its two jobs has finished (at 94 s), under static none."""
    pytest.importorskip("ray")
    import nbformat
    import papermill

    book = nbformat.read(NOTEBOOKS / "utilization_study.ipynb", as_version=4)
    after = next(i for i, c in enumerate(book.cells) if "share of jobs finished" in c.source and c.cell_type == "code")
    book.cells.insert(after + 1, nbformat.v4.new_code_cell(
        "print('curves:', [(line.get_color(), float(line.get_ydata()[-1])) for line in axs[0][0].lines])"))
    out = tmp_path / "probed.ipynb"
    papermill.execute_notebook(book, str(out), parameters={
        "scenarios": ["tiny"], "policies": ["static", "rlix"], "seeds": [0], "max_time_s": 100, "workers": 1,
        "out": str(tmp_path / "study")}, progress_bar=False, kernel_name="python3", cwd=str(tmp_path))
    text = "".join("".join(o.get("text", "")) for c in nbformat.read(out, as_version=4).cells
                   if c.cell_type == "code" for o in c.outputs)
    assert "curves: [('C1', 0.5)]" in text  # rlix's colour in the legend, half of its jobs


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
    longest = lengths.sort_values(ascending=False).head(-(-len(lengths) // 10))  # the longest 10%, rounded up
    assert f"math: the longest 10% of samples hold {longest.sum() / lengths.sum():.1%} of the tokens" in text


@pytest.mark.parametrize(("parameters", "expected"), [
    ({"scenarios": []}, "ValueError: scenarios=[]: give a non-empty list (papermill: -y 'scenarios: [...]')"),
    ({"seeds": []}, "ValueError: seeds=[]: give a non-empty list (papermill: -y 'seeds: [...]')"),
    ({"policies": "rlix"}, "ValueError: policies='rlix': give a non-empty list (papermill: -y 'policies: [...]')"),
    ({"seeds": [0, 0]}, "ValueError: seeds=[0, 0]: a value is given twice"),
    ({"workers": 0}, "ValueError: workers=0: give the number of local Ray workers, 1 or more"),
    ({"scenarios": ["tiny", "mine/tiny.yaml"]},
     "ValueError: scenarios=['tiny', 'mine/tiny.yaml']: 'tiny' and another would share the sweep folder "),
    ({"scenarios": ["tiny", "tinyy"]}, "ScenarioError: <scenario>: no bundled scenario 'tinyy'"),
    ({"policies": ["rlix", "rlx"]}, "unknown policy (known: gap-ratio, rlix, sequential, static, static-backfill)"),
    ({"out": "taken"}, "RunError: taken/tiny: "),  # then "<tmp_path>/taken is a file, so nothing can be written under it"
])
def test_the_utilization_study_names_a_bad_parameter_before_it_runs_anything(
        tmp_path: Path, parameters: dict[str, object], expected: str) -> None:
    out = tmp_path / "study"
    (tmp_path / "taken").write_text("")
    settings = {"scenarios": ["tiny"], "policies": ["rlix"], "seeds": [0], "workers": 1, "out": str(out)}
    assert expected in _first_error("utilization_study", tmp_path, **{**settings, **parameters})
    assert not out.exists()  # not even the good scenario's sweep ran


@pytest.mark.parametrize(("parameters", "expected"), [
    ({"trace": "agentc_small"},
     "TraceError: agentc_small: no such file, nor a bundled trace (agentic_small, math_16k, math_small)"),
    ({"trace": "math_small", "column_map": {"response_tokens": "resp_len"}},
     "TraceError: math_small: column_map is for a trace file; this is a bundled trace, already in rlix's columns"),
    ({"trace": "mine.csv", "column_map": "response_tokens=resp_len"},
     "ValueError: column_map='response_tokens=resp_len': give a mapping {rlix column: your column} "
     "(papermill: -y 'column_map: {response_tokens: resp_len}')"),
    ({"tail_fraction": 10},
     "ValueError: tail_fraction=10: give the tail as a share of the samples, in (0, 1]"),
])
def test_the_trace_explorer_names_a_bad_trace_parameter(tmp_path: Path, parameters: dict[str, object],
                                                        expected: str) -> None:
    assert _first_error("trace_explorer", tmp_path, **parameters) == expected


def test_sim_vs_exec_calibrates_on_a_short_live_run_and_predicts_an_unseen_one(tmp_path: Path) -> None:
    """Two short live runs (cpu-demo and its two-GPU variant, 2 steps a pipeline): the
    calibration, the prediction, the comparison; ~1.5 min on 2 cores."""
    pytest.importorskip("ray")
    pytest.importorskip("transformers")
    out, configs = tmp_path / "fidelity", ["two-gpus"]
    outputs = _run("sim_vs_exec", tmp_path, configs=configs, steps=2, out=str(out))
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert _images(outputs) == 2  # the errors against the targets, the side-by-side Gantt
    assert (out / "costs.yaml").is_file() and (out / "sim_vs_exec.png").is_file()
    text = "".join("".join(o["text"]) for o in outputs if o.get("name") == "stdout")  # type: ignore[arg-type]
    lines = text.split("errors per config", 1)[1].splitlines()[1:]
    assert "makespan" in lines[0] and "step time" in lines[0] and lines[1].startswith("config")
    rows = lines[2:2 + len(configs)]
    assert [row.split()[0] for row in rows] == configs and lines[2 + len(configs)].startswith("median step time error")
    for name, row in zip(configs, rows, strict=True):
        predicted, measured = (json.loads((out / name / side / "summary.json").read_text()) for side in ("sim", "live"))
        steps = {pid: figures["steps"] for pid, figures in measured["pipelines"].items()}
        assert measured["finished"] and steps == {"ft": 2, "lora": 4}  # lora: 2 for each of its 2 adapters
        error = abs(predicted["makespan_s"] - measured["makespan_s"]) / measured["makespan_s"]
        assert row.split()[1] == f"{error:.1%}"  # the table's makespan error is this run's
