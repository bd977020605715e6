"""A calibrated cost file (`costs.yaml`, written by `rlix-sim calibrate`) and reading it.

A scenario's `costs:` is either a mapping of cost constants or the path of such a file
(relative to the scenario file). A file is read and validated here, at load time, and its
constants replace the path, so the resolved scenario (a run folder's `scenario.yaml`) holds the
numbers themselves and replays without the file. The file:

    kind: rlix-costs
    calibrated_from: [runs/cpu-demo]          # the run folders the fit read
    costs: {load_s: 0.61, offload_s: 0.72, ...}   # what the simulator applies (rlix.sim.costs)
    fits:                                      # how well each constant fitted (for people)
      load_s: {value: 0.61, residual_s: 0.21, samples: 93}
    contention: {...}                          # the contention fit (rlix.sim.contention)
    driver: {...}                              # grant latency (rlix.sim.calibrate_events)
    machine: {cores: 2, own_demand: 3.1, background_demand: 1.4}   # CPU wanted: the runs, the rest
    concurrency: {fitted: true, form: linear, slope: 0.4, reference_concurrency: 2.5, ...}
                                               # per-op slowdown against run concurrency (rlix.sim.concurrency)

Only `costs` acts on a run; names there are checked by the simulator's cost model like any
`costs:` mapping. The constants hold for a machine as busy as the calibration runs' was;
`rlix.sim.calibrate.costs_for_background` rescales them to another load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from rlix.scenarios.errors import FieldProblem, ScenarioError, first_error, plain_message
from rlix.scenarios.sections import Section
from rlix.scenarios.source import SourceMap, dump_yaml, read_yaml

COSTS_KIND: Literal["rlix-costs"] = "rlix-costs"


class ConstantFit(Section):
    """One fitted constant: its value, the fit's root-mean-square residual and sample count."""

    value: float = Field(allow_inf_nan=False)
    """The constant (seconds, or seconds per token / sequence)."""
    residual_s: float = Field(ge=0, allow_inf_nan=False)
    """Root-mean-square residual of the fit it came from, in seconds of the fitted durations."""
    samples: int = Field(ge=0)
    """How many measured durations the fit used."""


class CostsFile(Section):
    """The file `rlix-sim calibrate` writes; `costs` is what a scenario applies."""

    kind: Literal["rlix-costs"] = COSTS_KIND
    """Marks the file as a calibrated cost file."""
    calibrated_from: list[str] = []
    """The run folders the constants were fitted from."""
    costs: dict[str, float] = Field(min_length=1)
    """Cost constants by name (rlix.sim.costs.CostModel fields), applied to every pipeline."""
    fits: dict[str, ConstantFit] = {}
    """Each fitted constant's residual and sample count."""
    contention: dict[str, Any] = {}
    """The contention fit: slowdown against concurrently busy units, and the choice made."""
    driver: dict[str, Any] = {}
    """The driver's overhead between a decision and its effect (grant latency), reported."""
    machine: dict[str, float] = {}
    """How busy the calibration runs' machine was (cores, own_demand, background_demand, and
    own_cores and machine_busy_share when the runs counted them: the mean of the runs'
    summary.json `machine`); empty when the runs did not say."""
    concurrency: dict[str, Any] = {}
    """The per-op slowdown against a run's concurrency across the calibration runs
    (rlix.sim.concurrency.fit_concurrency); `costs` hold at `reference_concurrency` and
    rlix.sim.concurrency.costs_at rescales them to another. Empty in files written before it."""


def read_costs_file(path: str | Path) -> CostsFile:
    """Read and validate a cost file; ValueError names the file, the line and what is wrong."""
    return read_costs_source(path)[0]


def read_costs_source(path: str | Path) -> tuple[CostsFile, SourceMap]:
    """`read_costs_file`, with the file's line map (where each constant is written)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read the cost file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read the cost file {path}: not UTF-8 text") from None
    try:
        # As scenario files are read: a key given twice is an error, not the last one silently.
        data, source = read_yaml(text, file=str(path), needs="a cost file needs at least `costs:`")
    except ScenarioError as exc:
        raise ValueError(f"the cost file {exc}") from None
    try:
        return CostsFile.model_validate(data), source
    except ValidationError as exc:
        error = first_error(exc)
        line = source.line_of(tuple(error["loc"])) if isinstance(data, dict) else None
        where = f"{path}:{line}" if line is not None else str(path)
        raise ValueError(f"the cost file {where}: {_file_problem(error, data)}") from None


def _file_problem(error: Any, data: Any) -> str:
    """What is wrong with a cost file, in a line: an unknown field first (a constant written at
    the top level is both unknown there and leaves `costs:` missing, and where it goes is the
    news)."""
    if not isinstance(data, dict):
        return f"a cost file is a YAML mapping (kind:, costs:, ...), not a {type(data).__name__}"
    where = ".".join(str(part) for part in error["loc"]) or "the file"
    if error["type"] == "extra_forbidden" and len(error["loc"]) == 1:
        known = ", ".join(CostsFile.model_fields)
        return f"{where}: unknown field (a cost file holds {known}; constants go under `costs:`)"
    if error["type"] == "missing":
        return f"{where}: required field missing"
    return f"{where}: {plain_message(error)}"


def resolve_costs(value: Any, base_dir: str | None, source: SourceMap | None = None) -> Any:
    """`costs:` as the scenario holds it: a path becomes the file's constants (raised as a
    FieldProblem at `costs` when the file is missing or bad), and `source`, the scenario's line
    map, learns that the file holds them (a bad constant found later names its line there);
    anything else is left as it is."""
    if not isinstance(value, str):
        return value
    path = Path(base_dir or ".").joinpath(Path(value).expanduser()).resolve()
    if not path.is_file():
        raise FieldProblem((), value, f"{'not a file' if path.exists() else 'no such cost file'} ({path})")
    try:
        costs, costs_source = read_costs_source(path)
    except ValueError as exc:
        raise FieldProblem((), value, str(exc)) from None
    if source is not None:
        source.included[("costs",)] = (costs_source, ("costs",))
    return dict(costs.costs)


def write_costs_file(costs: CostsFile, path: str | Path) -> Path:
    """Write `costs` as YAML (the form `read_costs_file` reads back equal).

    Written as every other output file is (`rlix.traces.io.write_atomically`): its folders are
    made, as `check_out_file` promised when it passed the path, and a failure is one error
    naming the file (a TraceError), never a half-written cost file in place of the old one."""
    from rlix.traces.io import write_atomically

    path = Path(path)
    text = dump_yaml(costs.model_dump(mode="json"), sort_keys=False, default_flow_style=False)
    content = f"# {COSTS_KIND}: fitted by `rlix-sim calibrate`; `costs` is what a scenario applies\n{text}"

    def write(part: Path) -> None:
        part.write_text(content, encoding="utf-8")

    write_atomically(path, write)
    return path
