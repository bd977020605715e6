"""A sweep's grid: axes over scenario fields, policy and seed, and the points they make.

An axis is a key and its values. The key is `policy`, `seed`, or a dotted path into the
scenario as its YAML is written (`topology.num_nodes`, `policy.config.min_rebalance_interval_s`,
`pipelines.0.steps`), naming any field the scenario's models define, whether the scenario sets
it or not (`pipelines.*.runtime_estimate_s`, `costs.load_s`); `*` in place of a list index sets that field of every element
(`pipelines.*.max_staleness`). Values are YAML scalars (`0`, `1.5`, `true`, `rlix`). The points
are the cartesian product of the axes, in the order the axes were given.

Every point is built and validated before anything runs, so a key that names no field or a
value of the wrong type is one error line naming the axis and value, and nothing runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import types
import typing
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import yaml
from pydantic import BaseModel

from rlix.scenarios import Scenario
from rlix.scenarios.errors import ScenarioError
from rlix.scenarios.load import validate_scenario
from rlix.scenarios.source import load_yaml
from rlix.sim.stages import scenario_costs
from rlix.traces.options import UsageError


def value_text(value: Any) -> str:
    """A grid value's text form: a string as it is, anything else as compact JSON (`2`, `true`,
    `{"gpus": "0-3", "tp": 1}`). How an axis whose values are not all of one plain kind (text,
    number, true/false) is stored and plotted."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=str)


def plain_kind(values: list[Any]) -> str | None:
    """"text", "number" or "bool" when every value (None aside) is of that one kind, else None
    (mixed kinds, or mappings and lists): such an axis is stored as text (`value_text`)."""
    kinds = set()
    for value in values:
        if value is None:
            continue
        if isinstance(value, bool):
            kinds.add("bool")
        elif isinstance(value, int | float):
            kinds.add("number")
        elif isinstance(value, str):
            kinds.add("text")
        else:
            return None
    return kinds.pop() if len(kinds) == 1 else None


@dataclass(frozen=True)
class Point:
    """One point of the grid: its values by axis, and the scenario they make."""

    values: dict[str, Any]
    scenario: Scenario

    @property
    def point_id(self) -> str:
        """Stable across runs (the values, not their order of evaluation): resume keys on it."""
        text = json.dumps(self.values, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Grid:
    axes: dict[str, list[Any]]

    @property
    def num_points(self) -> int:
        count = 1
        for values in self.axes.values():
            count *= len(values)
        return count

    def points(self, base: Scenario) -> list[Point]:
        """Every point, validated (UsageError naming the axis and value on the first bad one)."""
        keys = list(self.axes)
        out = []
        for combo in itertools.product(*(self.axes[k] for k in keys)):
            values = dict(zip(keys, combo, strict=True))
            out.append(Point(values, _apply(base, values)))
        return out


#: The most points one sweep runs: each is built and checked up front, and queued as a task.
MAX_POINTS = 10_000


def parse_grid(items: list[str], file_axes: dict[str, Any] | None = None) -> Grid:
    """Axes from `--grid KEY=V1,V2` items, after those of a sweep file's `grid:` mapping."""
    axes: dict[str, list[Any]] = {}
    for key, values in (file_axes or {}).items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"sweep file: grid.{key} must be a non-empty list of values")
        axes[str(key)] = _distinct(values, f"sweep file: grid.{key}")
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key or not text:
            raise UsageError(f"--grid expects KEY=V1,V2,... (e.g. policy=rlix,static), got {item!r}")
        values = []
        for piece in split_values(text):
            if not piece.strip():
                # YAML reads a blank as null: a stray comma would quietly add a point with the
                # field unset (or fail far from the typo); null itself is still a value to give
                raise UsageError(f"--grid {item}: an empty value (a comma too many?); write null for "
                                 f"no value")
            try:
                values.append(load_yaml(piece))
            except yaml.YAMLError as error:
                problem = getattr(error, "problem", None) or str(error).splitlines()[0]
                raise UsageError(f"--grid {item}: {piece!r} is not a YAML value ({problem}); a value "
                                 f"holding a comma is quoted or bracketed") from None
        name = key.strip()
        if name in axes:
            # a second axis of the same key would replace the first, whose points then never run
            where = "the sweep file's grid:" if name in map(str, file_axes or {}) else "an earlier --grid"
            raise UsageError(f"--grid {item}: the axis {name} is given already (in {where}); give all "
                             f"its values in one axis")
        axes[name] = _distinct(values, f"--grid {item}")
    if not axes:
        raise UsageError("a sweep needs at least one axis (--grid KEY=V1,V2 or a sweep file's grid:)")
    _refuse_overlaps(list(axes))
    grid = Grid(axes)
    if grid.num_points > MAX_POINTS:
        # refused before any point is built: building and checking a million points takes
        # minutes and gigabytes with nothing shown, and their tasks would all be queued at once
        sizes = " x ".join(str(len(values)) for values in axes.values())
        raise UsageError(f"the grid makes {grid.num_points:,} points ({sizes}), more than a sweep runs "
                         f"({MAX_POINTS:,}): split it into several sweeps, each with its own --out")
    return grid


def _refuse_overlaps(keys: list[str]) -> None:
    """UsageError if two axes set the same field, or one a field inside the other's (`policy`
    and `policy.name`, `topology` and `topology.num_nodes`, `pipelines.*.steps` and
    `pipelines.0.steps`): the later axis would overwrite the earlier one's value, and a point's
    row would show a value it did not run with."""
    paths = {key: ["policy", "name"] if key == "policy" else key.split(".") for key in keys}
    for i, first in enumerate(keys):
        for second in keys[i + 1:]:
            pairs = zip(paths[first], paths[second], strict=False)  # the shorter path's length
            if all(a == b or "*" in (a, b) for a, b in pairs):
                raise UsageError(f"the axes {first} and {second} set the same field: a point's row would "
                                 f"show a value it did not run with; give one axis")


def split_values(text: str) -> list[str]:
    """`V1,V2,...` split at the commas outside quotes and brackets, so a value may hold commas:
    `"2-3,0-1"`, `[1, 2]`, `{tp: 2, gpus: "0-3"}`. A quote opens a string only where a value
    starts or inside brackets (`it's` is plain text)."""
    pieces: list[str] = []
    start, depth, quote = 0, 0, ""
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"" and (depth or not text[start:i].strip()):
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "," and not depth:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    return pieces


def _distinct(values: list[Any], where: str) -> list[Any]:
    """The values of one axis, refused if one is given twice (the points would be the same)."""
    seen: set[str] = set()
    for value in values:
        text = json.dumps(value, sort_keys=True, default=str)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:  # 1 and 1.0 set a field alike: one point twice, under two labels
                text = f"number {Fraction(value)}"
            except (ValueError, OverflowError):  # nan, inf: their JSON text is theirs alone
                pass
        if text in seen:
            raise UsageError(f"{where}: the value {value_text(value)!r} is given twice")
        seen.add(text)
    return values


def _apply(base: Scenario, values: dict[str, Any]) -> Scenario:
    data = base.model_dump(mode="json", exclude_none=True)
    for key, value in values.items():
        if key == "policy":
            data["policy"] = {**data.get("policy", {}), "name": value}
        else:
            _set(data, key.split("."), value, key, Scenario)
    try:
        scenario = validate_scenario(data, base.source)
        scenario_costs(scenario)  # a cost constant's name and range, before any point runs
        return scenario
    except ScenarioError as error:
        raise UsageError(f"grid point {values}: {error}") from None


def _set(node: Any, path: list[str], value: Any, key: str, schema: Any) -> None:
    """Set `key` in the scenario's data. `schema` is the type the scenario's models give this
    node: a field they define may be set although the scenario leaves it out (unset optional
    fields are not in the data), and a section left out is made for it."""
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        indexes = range(len(node)) if head == "*" else [_index(head, node, key)]
        for index in indexes:
            if rest:
                _set(node[index], rest, value, key, _field_type(schema, "0"))
            else:
                node[index] = value
        return
    field = _field_type(schema, head) if isinstance(node, dict) else _NO_FIELD
    if not isinstance(node, dict) or head not in node and field is _NO_FIELD:
        raise UsageError(f"grid axis {key}: {head!r} names no field of the scenario")
    if not rest:
        node[head] = value
        return
    if head not in node:  # a section the scenario leaves out, e.g. a pipeline's trace cap
        node[head] = {}
    _set(node[head], rest, value, key, field)


#: What `_field_type` gives for a key the models do not define.
_NO_FIELD = object()


def _field_type(schema: Any, key: str) -> Any:
    """The type at `key` under `schema` (a pydantic model's field by name or alias, a mapping's
    values, a list's items for an index), `Any` where the models do not say, or `_NO_FIELD`."""
    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if schema is Any:
        return Any
    if origin is typing.Annotated:
        return _field_type(args[0], key)
    if origin in (typing.Union, types.UnionType):
        found = [t for t in (_field_type(arg, key) for arg in args if arg is not type(None)) if t is not _NO_FIELD]
        return found[0] if found else _NO_FIELD
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        for name, info in schema.model_fields.items():
            if key in (name, info.alias):
                return info.annotation
        return _NO_FIELD
    if origin is dict:
        return args[1] if args else Any
    if origin in (list, tuple):
        return (args[0] if args else Any) if key == "*" or key.isdigit() else _NO_FIELD
    return _NO_FIELD


def _index(text: str, node: list[Any], key: str) -> int:
    if not text.isdigit() or int(text) >= len(node):
        raise UsageError(f"grid axis {key}: {text!r} is not an index of a list of {len(node)}")
    return int(text)
