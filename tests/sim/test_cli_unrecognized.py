"""An argument no parser takes is reported by the sub-command it was given to, pointing at that
sub-command's --help (which lists its options), not at `rlix-sim --help` (which lists only the
sub-commands)."""

from __future__ import annotations

import pytest

from rlix.sim.cli import BAD_INPUT_STATUS, main


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["demo", "tiny", "extra"], "rlix-sim demo"),
        (["run", "tiny", "--bogus"], "rlix-sim run"),
        (["trace", "inspect", "a.csv", "b.csv"], "rlix-sim trace inspect"),
        (["replay", "runs/x", "runs/y"], "rlix-sim replay"),
    ],
)
def test_an_unrecognized_argument_names_its_sub_command(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == BAD_INPUT_STATUS
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"{prog}: error: unrecognized arguments: {argv[-1]} (see {prog} --help)\n"
