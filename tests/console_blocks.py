"""Running a documentation page's ```console blocks as the page says a reader would.

A page marks what the tests run by fencing it ```console: lines starting with ``$ `` are
commands, lines right after one that start with ``> `` continue it (as bash's second
prompt shows them), and the lines after a command up to the next one are what the reader
sees. In expected output ``...`` matches anything
(within a line or across lines), so a page can show the parts that stay the same and
elide ids, tokens and times. Other fences (```sh, ```text, ```json) are shown, not run.

Every block runs in one ``bash`` session, so a variable or a function defined by one
command is there for the next, as in the reader's terminal. A command whose output does
not match yet is run again (until a deadline) only when it changes nothing: a ``curl``
that sends no body and names no method, or a listing. That is the page's "after a moment
you see": projections, mail and reminders are eventually consistent, and a page should
not pretend otherwise with sleeps.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sluice.app.testing import patience

_FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)$")
# A command that only reads: retried while the page's eventual answer is not there yet.
_WRITES = re.compile(r"(^|\s)(-X\S*|--request|-d|--data\S*|-T|--upload-file|-F|--form)(\s|$)")
_ASSIGNS = re.compile(r"^\s*(export\s+)?[A-Za-z_][A-Za-z0-9_]*=|^\s*\w+\s*\(\)")


@dataclass(frozen=True)
class Step:
    """One ``$ `` command of a page and the output the page says it prints."""

    command: str
    expected: str
    line: int  # of the command in the page, 1-based, for the failure message

    @property
    def read_only(self) -> bool:
        return not _WRITES.search(self.command) and not _ASSIGNS.search(self.command)


def steps(markdown: str) -> list[Step]:
    """The commands of every ```console block of ``markdown``, in page order."""
    found: list[Step] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        i += 1
        if not fence:
            continue
        indent, body = len(fence["indent"]), []
        start = i
        while i < len(lines) and not re.match(r"^ *```\s*$", lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        if fence["info"].strip() == "console":
            found.extend(_block_steps(body, start))
    return found


def _block_steps(body: list[str], first_line: int) -> Iterator[Step]:
    command: list[str] = []
    expected: list[str] = []
    at = 0
    for offset, text in enumerate(body):
        if command and not expected and text.startswith("> "):
            command.append(text[2:])
        elif text.startswith("$ "):
            if command:
                yield Step("\n".join(command), "\n".join(expected), at)
            command, expected, at = [text[2:]], [], first_line + offset + 1
        elif command:
            expected.append(text)
    if command:
        yield Step("\n".join(command), "\n".join(expected), at)


def matches(expected: str, actual: str) -> bool:
    """``actual`` is what ``expected`` shows, ``...`` standing for anything."""
    pattern = ".*?".join(re.escape(part) for part in _normal(expected).split("..."))
    return re.fullmatch(pattern, _normal(actual), re.DOTALL) is not None


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).strip()


class Shell:
    """One ``bash`` the steps run in, one after the other, sharing its variables."""

    def __init__(self, cwd: Path, env: Mapping[str, str]) -> None:
        self._process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=dict(env),
            text=True,
            bufsize=1,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, command: str, timeout: float = 30.0) -> str:
        """What ``command`` printed (stdout and stderr, as a terminal shows them)."""
        assert self._process.stdin is not None
        marker = f"__done_{uuid.uuid4().hex}"
        self._process.stdin.write(f"{command}\nprintf '\\n{marker}\\n'\n")
        self._process.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + patience(timeout)
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no end of {command!r} within {timeout}s") from None
            if line is None:
                raise AssertionError(f"the shell ended during {command!r}: {''.join(out)}")
            if line.rstrip("\n") == marker:
                return "".join(out).removesuffix("\n")
            out.append(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()
        try:
            self._process.wait(5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        assert self._process.stdout is not None
        self._process.stdout.close()


def run_steps(shell: Shell, page: list[Step], replace: Mapping[str, str], wait: float) -> None:
    """Run every step; fail on the first whose output is not what the page shows.

    ``replace`` rewrites what differs between the page and the test (the page's port).
    A read-only step is retried until it matches or ``wait`` seconds have passed.
    """
    for step in page:
        command, expected = step.command, step.expected
        for old, new in replace.items():
            command, expected = command.replace(old, new), expected.replace(old, new)
        deadline = time.monotonic() + (wait if step.read_only else 0.0)
        while True:
            actual = shell.run(command)
            if matches(expected, actual):
                break
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"tutorial line {step.line}: $ {command}\n"
                    f"the page shows:\n{expected}\nbut it printed:\n{actual}"
                )
            time.sleep(0.25)


def environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The test's environment without its own SLUICE_ settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(extra)
    return env
