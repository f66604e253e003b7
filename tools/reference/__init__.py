"""The reference pages under docs/reference/, generated from the code (``make reference``).

Each page comes from one thing the code already has and uses: configuration.md from the
config struct and .env.example, cli.md from the argument parser, events.md from the event
union, metrics.md from the metrics catalogue, http-api.md from the OpenAPI document the
API serves, app-api.md from the public modules an app imports. A page is never edited
by hand: tests/unit/test_reference_docs.py generates them again and fails when the
committed ones differ, and generation itself stops when the code has something its
description lacks (``Undocumented``).

Kept out of the ``sluice`` package (contributors run it; an installation never does) and
out of docs/ (MkDocs would publish it).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from tools.reference import app_api, cli, configuration, events, http_api, metrics
from tools.reference.sources import ROOT, Sources, current

DOCS = ROOT / "docs" / "reference"


def generate(sources: Sources | None = None) -> dict[str, str]:
    """Every page's text by file name, from ``sources`` (the code as it is by default)."""
    s = current() if sources is None else sources
    return {
        configuration.PAGE: configuration.render(
            s.config, s.env_example, s.load_config, s.read_elsewhere, s.app_settings
        ),
        cli.PAGE: cli.render(s.parser),
        events.PAGE: events.render(s.events, s.stream_of),
        metrics.PAGE: metrics.render(s.metrics, s.registered),
        http_api.PAGE: http_api.render(s.document),
        app_api.PAGE: app_api.render(s.public),
    }


def write(pages: dict[str, str], directory: Path = DOCS) -> list[str]:
    """Write the pages that changed; their names."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, text in pages.items():
        path = directory / name
        if not path.exists() or path.read_text("utf-8") != text:
            path.write_text(text, "utf-8")
            changed.append(name)
    return changed


def stale(pages: dict[str, str], directory: Path = DOCS) -> list[str]:
    """What differs between ``pages`` and the committed ones, page by page: the lines the
    code now gives (+) and those the committed page has instead (-)."""
    differences = []
    for name, text in pages.items():
        path = directory / name
        committed = path.read_text("utf-8") if path.exists() else ""
        if committed == text:
            continue
        lines = [
            line
            for line in difflib.unified_diff(committed.splitlines(), text.splitlines(), n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        shown = "\n".join(f"  {line[:160]}" for line in lines[:12])
        more = f"\n  ... and {len(lines) - 12} more lines" if len(lines) > 12 else ""
        differences.append(f"docs/reference/{name} is stale:\n{shown}{more}")
    return differences
