"""The files a documentation page builds, read from its code blocks.

A page that builds something piece by piece (docs/guides/write-an-app.md builds an app)
starts each block that is part of it with a comment naming the file: ``# src/pkg/app.py``
is that file, and a later block naming it again (``# src/pkg/app.py, continued``) is its
next part. Blocks that name no file show a variant and are not part of it. A test
assembles the files as a reader would, so the page's blocks are what is checked.
"""

from __future__ import annotations

import re
from pathlib import Path

_BLOCK = re.compile(r"^```(?P<info>\w*)\n(?P<body>.*?)^```$", re.DOTALL | re.MULTILINE)
_NAMED = re.compile(r"^# (?P<path>[\w./-]+\.(?:py|toml))\b")


def blocks(markdown: str, language: str) -> list[str]:
    """The bodies of the page's ```language blocks, in page order."""
    return [m["body"] for m in _BLOCK.finditer(markdown) if m["info"] == language]


def files(markdown: str) -> dict[str, str]:
    """Each file the page's ```python and ```toml blocks name, its parts joined in page
    order."""
    built: dict[str, str] = {}
    for block in _BLOCK.finditer(markdown):
        named = _NAMED.match(block["body"])
        if block["info"] in ("python", "toml") and named:
            part = block["body"]
            built[named["path"]] = (
                f"{built[named['path']]}\n\n{part}" if named["path"] in built else part
            )
    return built


def write(markdown: str, directory: Path) -> list[str]:
    """The page's files written under ``directory``; their paths."""
    written = files(markdown)
    for name, text in written.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return sorted(written)
