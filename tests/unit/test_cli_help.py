"""``sluice --help`` and every command's ``--help``: what it does, in one line, and where
its docs are (the command's section of docs/reference/cli.md, by repository path)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sluice.cli.main import build_parser
from tools.reference.cli import commands

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
COMMANDS = [command.prog.split()[1:] for command in commands(build_parser())]


def help_of(words: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``sluice WORDS --help`` prints."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*words, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_sluice_help_says_what_it_is_and_where_the_commands_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of([], capsys)
    assert "event-sourced backend service on Redis Streams" in text
    assert "docs:  docs/reference/cli.md (every command)" in text
    for words in COMMANDS:
        if len(words) == 1:
            assert re.search(rf"^    {re.escape(words[0])}\b", text, re.MULTILINE), words


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_each_command_says_what_it_does_in_one_line_and_points_to_its_docs(
    words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of(words, capsys)
    usage, summary, *_ = text.split("\n\n")
    assert usage.startswith(f"usage: sluice {' '.join(words)}")
    assert "\n" not in summary and summary.endswith(".") and len(summary) <= 79, summary
    anchor = "-".join(["sluice", *words])
    [pointer] = re.findall(r"^docs:  (\S+)$", text, re.MULTILINE)
    assert pointer == f"docs/reference/cli.md#{anchor}"
    # The section it points to is there, under the heading that makes that anchor.
    heading = f"{'#' * (len(words) + 1)} sluice {' '.join(words)}"
    assert f"\n{heading}\n" in CLI_PAGE.read_text()
