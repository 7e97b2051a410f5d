"""The `deltaflow` command: one parser lists every command, the operator's and the data plane's,
with the exit codes; a mistake in the arguments is refused naming the argument."""

from __future__ import annotations

import pytest

from deltaflow_cli.main import main
from deltaflow_runtime.cli import COMMANDS


def test_help_lists_every_command_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for command in ("crd", "operator", *COMMANDS):
        assert f"\n    {command} " in text or f"\n    {command}\n" in text, command
    assert "exit codes:" in text
    for code in range(6):
        assert f"\n  {code}  " in text


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["vacuum"], "--config"),
        (["run"], "-f/--filename"),
        (["stream", "--config"], "--config"),
        (["optimise"], "invalid choice: 'optimise'"),
    ],
)
def test_a_mistake_in_the_arguments_exits_2_naming_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert named in capsys.readouterr().err


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "recover-checkpoint" in capsys.readouterr().out
