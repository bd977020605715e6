"""GPU sets as a scenario writes them: a YAML list of ids, one id, or a range string.

``"0-7"`` is GPUs 0..7, ``"0-3,8-11"`` is 0..3 then 8..11, ``5`` is GPU 5, ``[0, 1, 8]`` is
those three. Order is kept (a rollout mapping's order decides which GPUs form rank r's TP
bundle), so a set is a tuple, not a frozenset. Written back (`to_yaml`) a set is the shortest
range string that parses to the same tuple.

A pipeline's `home` is a GPU set or a size (a bare integer: the policy places it), and a
cluster's `gpus` may say `home` or `pool` instead of a set (see rlix.policy.homes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from rlix.policy.specs import SCOPES

_SHAPE = "a GPU set is a list of GPU ids, one id, or a range string like '0-7' or '0-3,8-11'"

#: The most GPUs a pool may have (128 times cluster-1024's). A bound, so that a typo such as
#: "0-99999999999" or `num_nodes: 100000000` is refused in a line, not met by running out of
#: memory building the ids.
MAX_POOL_GPUS = 1 << 17


def parse_gpu_set(value: object) -> tuple[int, ...]:
    """Parse any accepted spelling of a GPU set; ValueError says what is wrong."""
    if isinstance(value, bool):
        raise ValueError(_SHAPE)
    if isinstance(value, int):
        return (value,)
    if isinstance(value, str):
        return _parse_ranges(value)
    if isinstance(value, list | tuple):
        for gpu in value:
            if not isinstance(gpu, int) or isinstance(gpu, bool):
                raise ValueError(f"GPU id {gpu!r} is not an integer ({_SHAPE})")
        return tuple(value)
    raise ValueError(_SHAPE)


def _parse_ranges(text: str) -> tuple[int, ...]:
    if not text.strip():
        return ()  # the empty set, as format_gpu_set writes it; the checks reject it where it matters
    gpus: list[int] = []
    for part in text.split(","):
        first, dash, last = (s.strip() for s in part.partition("-"))
        # ASCII digits only: str.isdigit also takes "²" (which int() refuses) and "０".
        if not (_is_number(first) and (not dash or _is_number(last))):
            raise ValueError(f"{part.strip()!r} is neither a GPU id nor a range a-b ({_SHAPE})")
        start, end = int(first), int(last) if dash else int(first)
        if end < start:
            raise ValueError(f"range {part.strip()!r} runs backwards")
        if end - start >= MAX_POOL_GPUS:
            raise ValueError(f"range {part.strip()!r} names more GPUs than a pool holds (at most {MAX_POOL_GPUS})")
        gpus.extend(range(start, end + 1))
    return tuple(gpus)


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def format_gpu_set(gpus: Sequence[int]) -> str:
    """The shortest range string for `gpus` in its order: (0, 1, 2, 3, 8) -> "0-3,8"."""
    parts: list[str] = []
    i = 0
    while i < len(gpus):
        j = i
        while j + 1 < len(gpus) and gpus[j + 1] == gpus[j] + 1:
            j += 1
        parts.append(str(gpus[i]) if i == j else f"{gpus[i]}-{gpus[j]}")
        i = j + 1
    return ",".join(parts)


#: A field holding a GPU set: validated from any spelling, written back as a range string.
GpuSet = Annotated[
    tuple[int, ...],
    BeforeValidator(parse_gpu_set),
    PlainSerializer(format_gpu_set, return_type=str, when_used="json"),
]


def parse_home(value: object) -> int | tuple[int, ...]:
    """A home: a bare integer is a size (the policy places it), anything else a GPU set."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError("a home size must be a positive number of GPUs")
        return value
    return parse_gpu_set(value)


def parse_cluster_gpus(value: object) -> str | tuple[int, ...]:
    """A cluster's GPUs: "home" or "pool" (they follow the pipeline's home), or a GPU set."""
    if isinstance(value, str) and value.strip() in SCOPES:
        return value.strip()
    return parse_gpu_set(value)


def _format_home(value: int | str | tuple[int, ...]) -> int | str:
    return value if isinstance(value, int | str) else format_gpu_set(value)


#: A pipeline's home: a size (an integer) or a GPU set.
Home = Annotated[
    int | tuple[int, ...],
    BeforeValidator(parse_home),
    PlainSerializer(_format_home, return_type=int | str, when_used="json"),
]

#: A cluster's GPUs: a GPU set, or "home" / "pool".
ClusterGpus = Annotated[
    str | tuple[int, ...],
    BeforeValidator(parse_cluster_gpus),
    PlainSerializer(_format_home, return_type=int | str, when_used="json"),
]
