"""Loading scenarios: bundled names, YAML files, YAML text, plain data; errors with lines.

Every failure is one `ScenarioError`: pydantic's first error (or the first cross-field
problem) with its field path, value and the YAML line the path is on.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rlix.scenarios.errors import NO_VALUE, FieldProblem, ScenarioError, first_error, plain_message
from rlix.scenarios.schema import Scenario
from rlix.scenarios.source import SourceMap, read_yaml

_SUFFIXES = (".yaml", ".yml")

#: Extra words for a missing required field, by field name.
_MISSING_HINTS = {
    "home": "every pipeline needs a home (the GPUs it would own without sharing)",
    "trace": "no trace: give `trace:` on the pipeline or at the top level",
}


def bundled_scenarios() -> list[str]:
    """Names of the scenarios shipped with rlix, e.g. ``["agentic-4x32", ..., "tiny"]``."""
    data = resources.files("rlix.scenarios").joinpath("data")
    return sorted(
        entry.name.rsplit(".", 1)[0] for entry in data.iterdir() if entry.name.endswith(_SUFFIXES)
    )


def load_scenario(name_or_path: str | os.PathLike[str]) -> Scenario:
    """A bundled scenario by name (``"agentic-4x32"``) or a scenario YAML file by path.

    A string is a path if it has a directory part or a .yaml/.yml suffix, or names an existing
    file; otherwise it is a bundled name. Relative trace paths in a file are relative to it.
    """
    data, source, base_dir = read_scenario(name_or_path)
    return validate_scenario(data, source, base_dir)


def read_scenario(name_or_path: str | os.PathLike[str]) -> tuple[Any, SourceMap, Path | None]:
    """The YAML data of a scenario (as `load_scenario` finds it), not yet validated, with its
    line map and the folder its relative paths are relative to (None: the current one).

    For callers that change the data before it is validated: fields a scenario needs may come
    from them (a job log's pipelines, `--jobs`)."""
    text = os.fspath(name_or_path)
    is_path = (
        not isinstance(name_or_path, str)
        or os.sep in text
        or "/" in text
        or text.endswith(_SUFFIXES)
        or Path(text).is_file()
    )
    if is_path:
        return _read_file(Path(text))
    if text not in bundled_scenarios():
        raise ScenarioError(
            f"no bundled scenario {text!r} and no such file "
            f"(bundled: {', '.join(bundled_scenarios())})"
        )
    resource = resources.files("rlix.scenarios").joinpath("data", f"{text}.yaml")
    data, source = read_yaml(resource.read_text(encoding="utf-8"), file=str(resource))
    return data, source, None


def _read_file(path: Path) -> tuple[Any, SourceMap, Path]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ScenarioError(f"cannot read the scenario file: {reason}", file=str(path)) from None
    data, source = read_yaml(text, file=str(path))
    return data, source, path.resolve().parent


def parse_scenario(
    text: str, file: str | None = None, base_dir: str | os.PathLike[str] | None = None
) -> Scenario:
    """A scenario from YAML `text`; `file` names it in errors, `base_dir` anchors trace paths
    (default: the current directory)."""
    data, source = read_yaml(text, file)
    return validate_scenario(data, source, base_dir)


def validate_scenario(
    data: Any, source: SourceMap | None = None, base_dir: str | os.PathLike[str] | None = None
) -> Scenario:
    """A scenario from plain data (the parsed YAML); `source` gives errors their lines."""
    # A copy: what this validation learns (a cost file's lines) must not reach a scenario
    # validated earlier from the same source.
    source = dataclasses.replace(source, included=dict(source.included)) if source else SourceMap()
    if not isinstance(data, dict):
        raise source.error(
            (), NO_VALUE, f"a scenario is a YAML mapping (name:, topology:, pipelines:, ...), not a {type(data).__name__}"
        )
    context = {"base_dir": None if base_dir is None else os.fspath(base_dir), "source": source}
    try:
        scenario = Scenario.model_validate(data, context=context)
    except ValidationError as exc:
        raise _scenario_error(exc, source) from None
    scenario._source = source
    return scenario


def _scenario_error(exc: ValidationError, source: SourceMap) -> ScenarioError:
    """pydantic's first error (`first_error`: an unknown field first) as a ScenarioError at its
    field path and line."""
    error = first_error(exc)
    loc = tuple(error["loc"])
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, FieldProblem):
        return source.error((*loc, *cause.path), cause.value, cause.problem)
    if isinstance(cause, ValueError):
        return source.error(loc, error["input"], str(cause))
    kind = error["type"]
    if kind == "missing":
        hint = _MISSING_HINTS.get(str(loc[-1]), "")
        return source.error(loc, NO_VALUE, "required field missing" + (f": {hint}" if hint else ""))
    if kind == "extra_forbidden":
        return source.error(loc, error["input"], _unknown_field(loc))
    return source.error(loc, error["input"], plain_message(error))


def _unknown_field(loc: tuple[str | int, ...]) -> str:
    known = _fields_at(loc[:-1])
    if not known:
        return "unknown field"
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown field (known here: {', '.join(known)}){hint}"


def _fields_at(loc: tuple[str | int, ...]) -> list[str] | None:
    """YAML keys of the model at `loc` (following lists, dicts and optionals), if it is one."""
    current: Any = Scenario
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {info.alias or name: info for name, info in current.model_fields.items()}
            if part not in fields:
                return None
            current = fields[str(part)].annotation
        elif typing.get_origin(current) in (list, tuple, dict):
            current = typing.get_args(current)[-1 if typing.get_origin(current) is dict else 0]
        else:
            return None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [info.alias or name for name, info in current.model_fields.items()]
    return None


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation

