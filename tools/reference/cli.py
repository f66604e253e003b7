"""docs/reference/cli.md: every command and flag of the ``sluice`` parser (``build_parser``).

Each (sub)command's section says what its ``--help`` says: the description, the usage,
every argument with its help, and the guide its epilog points to. A command or an
argument without help stops generation, and so does an epilog whose ``docs:`` pointer
is not the command's section here. The usage line is built from the arguments rather
than taken from argparse, whose wrapping follows the terminal and the Python version.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from tools.reference.markdown import code, generated, page, prose, table
from tools.reference.undocumented import Undocumented

PAGE = "cli.md"
POINTER = re.compile(r"(?P<kind>docs|guide): +(?P<path>\S+)")


def anchor(prog: str) -> str:
    """The id MkDocs (and GitHub) give the heading ``prog``: "sluice tasks run" ->
    "sluice-tasks-run"."""
    return prog.replace(" ", "-")


def commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every subcommand's parser, depth first, in the order ``--help`` lists them.
    argparse has no public way to reach them; ``_actions`` has held them since 2.7."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from commands(child)


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        and not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    ]


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    return action.dest if not action.option_strings else action.dest.upper()


def _usage(parser: argparse.ArgumentParser) -> str:
    words = [parser.prog]
    arguments = _arguments(parser)
    if any(action.option_strings for action in arguments):
        words.append("[OPTIONS]")
    for action in arguments:
        if action.option_strings:
            continue
        name = _metavar(action)
        if " " in name:  # a shape of its own ("[GROUP] ID"), not one word repeated
            forms = {"*": f"[{name}]", "?": f"[{name}]"}
        else:
            forms = {"+": f"{name} [{name} ...]", "*": f"[{name} ...]", "?": f"[{name}]"}
        words.append(forms.get(str(action.nargs), name))
    if any(isinstance(action, argparse._SubParsersAction) for action in parser._actions):
        words.append("ACTION ...")
    return " ".join(words)


def _row(action: argparse.Action) -> list[str]:
    if action.option_strings:
        takes_value = action.nargs != 0
        value = code(_metavar(action)) if takes_value else ""
        name = ", ".join(code(option) for option in action.option_strings)
    else:
        value, name = "", code(_metavar(action))
    if action.required and action.option_strings:
        default = "required"
    elif action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        default = code(str(action.default))
    else:
        default = ""
    return [name, value, default, prose(action.help or "")]


def _problems(parser: argparse.ArgumentParser, top: bool) -> Iterator[str]:
    if not parser.description:
        yield f"`{parser.prog}` has no description (what it does, in one line)"
    for action in _arguments(parser):
        if not action.help:
            yield f"`{parser.prog}` {'/'.join(action.option_strings) or action.dest}: no help"
    pointers = dict(POINTER.findall(parser.epilog or ""))
    wanted = f"docs/reference/{PAGE}" + ("" if top else f"#{anchor(parser.prog)}")
    if not pointers.get("docs", "").startswith(wanted):
        yield f"`{parser.prog} --help` does not point to {wanted}"


def _section(parser: argparse.ArgumentParser) -> str:
    depth = parser.prog.count(" ")
    blocks = [f"{'#' * (depth + 1)} {parser.prog}", prose(parser.description or "")]
    blocks.append(f"```text\n{_usage(parser)}\n```")
    arguments = _arguments(parser)
    if arguments:
        blocks.append(table(["Argument", "Value", "Default", "Meaning"], map(_row, arguments)))
    guides = [path for kind, path in POINTER.findall(parser.epilog or "") if kind == "guide"]
    for guide in guides:
        # From docs/reference/ to the guide, as MkDocs resolves links between pages.
        blocks.append(f"Guide: [{guide}](../{guide.removeprefix('docs/')})")
    return "\n\n".join(blocks)


def render(parser: argparse.ArgumentParser) -> str:
    """The page; raises ``Undocumented`` naming every command or argument without help."""
    everything = list(commands(parser))
    problems = [p for p in _problems(parser, top=True)]
    problems += [p for child in everything for p in _problems(child, top=False)]
    if problems:
        raise Undocumented(PAGE, problems)
    overview = table(
        ["Command", "What it does"],
        (
            [
                f"[{code(child.prog)}](#{anchor(child.prog)})",
                prose(child.description or "").split("\n\n")[0],
            ]
            for child in everything
        ),
    )
    intro = (
        "# Command line\n\n"
        + prose(parser.description or "")
        + "\n\nEvery command reads the configuration from `SLUICE_*` variables"
        " ([configuration](configuration.md)); `sluice COMMAND --help` prints what this page"
        " says of it."
    )
    return page(
        generated("the argument parser of sluice/cli/main.py (build_parser)"),
        intro,
        "## Commands",
        overview,
        *(_section(child) for child in everything),
    )
