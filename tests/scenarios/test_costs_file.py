"""A cost file is read as scenario files are: a key given twice, text that is not UTF-8 and an
empty file are each one line naming the file (and the line where there is one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.scenarios.costs import read_costs_file


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"costs: {load_s: 1}\ncosts: {load_s: 2}\n", "costs.yaml:2: costs: key given twice (first on line 1)"),
     ("costs: {load_s: 1}\n".encode("utf-16"), "cannot read the cost file"),
     (b"# nothing\n", "the file is empty (a cost file needs at least `costs:`)"),
     (b"costs: {load_s: 1}\nfits: 1" + b"9" * 5000 + b"\n", "costs.yaml:2: YAML value error: cannot read int")],
    ids=["key twice", "not UTF-8", "empty", "integer too long"],
)
def test_a_bad_cost_file_is_one_line(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "costs.yaml"
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        read_costs_file(path)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
