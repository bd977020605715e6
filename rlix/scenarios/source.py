"""Reading scenario YAML: the data, plus a map from field paths to the lines they are on (and
writing it back, `dump_yaml`).

PyYAML's `compose` gives every node a start mark; walking the node tree before constructing it
gives `{("pipelines", 2, "clusters", "actor_infer", "tp"): 14, ...}`, so an error found later by
pydantic or by the cross-field checks can name its line. Two things PyYAML gets wrong for a
config file are fixed here: a key given twice is an error (PyYAML keeps the last silently), and
``1e-5`` is a float (YAML 1.1 wants ``1.0e-5``; without the fix a learning rate becomes a
string).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from rlix.scenarios.errors import Path, ScenarioError, format_path

# libyaml's parser and emitter where PyYAML was built with it: the same documents, nodes and
# marks, and the same text, several times faster (an expanded stream of a thousand jobs is tens
# of thousands of lines).
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]  # a variable base: either loader
    """SafeLoader that also reads exponent floats without a dot (1e-5, 3E8)."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's constructors raise plain errors for scalars their tag cannot hold
        (`2024-13-45`, `!!int abc`, `!!bool maybe`, an integer of 5,000 digits); raised as
        a marked error here, they name their line like any syntax error."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            why = "" if isinstance(exc, KeyError) else f": {exc}"  # a KeyError's text is the scalar again
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.tag.rsplit(':', 1)[-1]} {_short(node)}{why}", node.start_mark
            ) from None


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _short(node: yaml.Node) -> str:
    """The scalar's text, cut to a line's worth (an over-long integer is the likely one)."""
    text = str(node.value) if isinstance(node, yaml.ScalarNode) else ""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def load_yaml(text: str) -> Any:
    """`text` as scenario files are read (exponent floats without a dot are floats), without
    the line map: for the other YAML users write (a sweep's --grid and file, cost files)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def dump_yaml(data: Any, **options: Any) -> str:
    """`data` as YAML text (`yaml.safe_dump`'s output and `options`)."""
    text: str = yaml.dump(data, Dumper=_SafeDumper, **options)
    return text


@dataclass(frozen=True)
class SourceMap:
    """Where a scenario came from (`file`, None for in-memory data) and its fields' lines."""

    file: str | None = None
    lines: dict[Path, int] = field(default_factory=dict)
    #: Fields whose values another file holds (a scenario's `costs: FILE`, or `--costs`): the
    #: field's path here -> that file's map and the field's path there, so that an error in such
    #: a value names the line that holds it, not the line that named the file.
    included: dict[Path, tuple[SourceMap, Path]] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of `path`, or of its nearest ancestor that is in the file."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def error(self, path: Path, value: object, problem: str) -> ScenarioError:
        """A ScenarioError for `path` with this source's file and the path's line (or the file
        and line of an included value's)."""
        for prefix, (other, there) in self.included.items():
            if tuple(path[: len(prefix)]) == prefix:
                return ScenarioError(problem, file=other.file, line=other.line_of((*there, *path[len(prefix):])),
                                     path=format_path(path), value=value)
        return ScenarioError(
            problem, file=self.file, line=self.line_of(path), path=format_path(path), value=value
        )


def read_yaml(
    text: str, file: str | None = None, needs: str = "a scenario needs at least name, topology and pipelines"
) -> tuple[Any, SourceMap]:
    """Parse YAML `text`; return the data and the field-path line map.

    Raises ScenarioError for a syntax error (with its line), a duplicate key, or an empty
    document (saying what the file `needs`: the other YAML files read here are not scenarios).
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError(f"the file is empty ({needs})", file=file)
        lines: dict[Path, int] = {}
        _walk(node, (), lines, file)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        what = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        column = "" if mark is None else f" (column {mark.column + 1})"
        # A constructor error is well-formed YAML holding a value its tag cannot make
        # (`2024-13-45`, `!!int abc`, an unknown tag): "syntax" would send the user looking
        # for a typo in the layout.
        kind = "value" if isinstance(exc, yaml.constructor.ConstructorError) else "syntax"
        raise ScenarioError(f"YAML {kind} error: {what}{column}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"YAML error: {exc}", file=file) from None
    finally:
        loader.dispose()
    return data, SourceMap(file, lines)


def _walk(
    node: yaml.Node,
    path: Path,
    lines: dict[Path, int],
    file: str | None,
    walked: set[int] | None = None,
) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    walked = set() if walked is None else walked
    if id(node) in walked:
        # An alias of a node already mapped (or a recursive one): its fields fall back to this
        # line. Mapping every use again costs 9**9 paths for nine nested aliases of nine.
        return
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[object, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` keys come from elsewhere; the anchor has the lines
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is None:
                continue  # pydantic reports a non-string key
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise ScenarioError(
                    f"key given twice (first on line {first_line[key]})",
                    file=file,
                    line=line,
                    path=format_path((*path, key)),
                )
            first_line[key] = line
            lines[(*path, key)] = line
            _walk(value_node, (*path, key), lines, file, walked)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _walk(item, (*path, index), lines, file, walked)
