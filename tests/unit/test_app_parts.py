"""The core names none of the apps' parts: each app declares its own settings, metrics,
Redis keys and OpenAPI tags (docs/guides/write-an-app.md, "Settings and metrics"), so a core module
that names one has taken a part back from its app."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

import sluice
from sluice.app.assembly import default_apps

SLUICE = Path(sluice.__file__).parent
# The modules that held the apps' parts before they declared them.
CORE_MODULES = (
    "config/__init__.py",
    "telemetry/prometheus.py",
    "streams/engine_keys.py",
    "http/route_docs.py",
    "http/openapi.py",
)


def _engine_sources() -> dict[str, str]:
    """Every module of sluice outside the built-in apps, by path."""
    return {
        str(path.relative_to(SLUICE)): path.read_text("utf-8")
        for path in SLUICE.rglob("*.py")
        if "builtin" not in path.relative_to(SLUICE).parts
    }


def _parts() -> list[tuple[str, str, re.Pattern[str]]]:
    """(app, part, the pattern a core module naming it would match)."""
    parts: list[tuple[str, str, re.Pattern[str]]] = []
    for app in default_apps().apps:
        for field in msgspec.structs.fields(app.settings) if app.settings else ():
            word = rf"\b({field.name}|SLUICE_{field.name.upper()})\b"
            parts.append((app.name, f"setting {field.name}", re.compile(word)))
        for metric in app.metrics:
            parts.append((app.name, f"metric {metric}", re.compile(rf"\b{metric}\b")))
        for method in vars(app.keys) if app.keys else ():
            if not method.startswith("_"):
                parts.append((app.name, f"key {method}", re.compile(rf"\b{method}\(")))
        for tag in app.tags:
            parts.append((app.name, f"tag {tag}", re.compile(rf"[\"']{tag}[\"']")))
    return parts


def test_the_built_in_apps_declare_parts() -> None:
    kinds = {part.split()[0] for _, part, _ in _parts()}
    assert kinds == {"setting", "metric", "key", "tag"}


@pytest.mark.parametrize("module", CORE_MODULES)
def test_no_core_module_names_an_apps_setting_metric_key_or_tag(module: str) -> None:
    text = (SLUICE / module).read_text("utf-8")
    named = [f"{part} of app {app!r}" for app, part, pattern in _parts() if pattern.search(text)]
    assert named == [], f"sluice/{module} names {named}"


def test_no_engine_module_uses_an_apps_setting_metric_or_key() -> None:
    """Beyond those five: no module outside sluice/builtin reads an app's setting,
    counts its metric or builds its key (a mention in prose, as the admin page's, is not a use)."""
    found = []
    for path, text in _engine_sources().items():
        code = "\n".join(line.split("#")[0] for line in text.splitlines())
        for app, part, pattern in _parts():
            if not part.startswith("tag") and re.search(rf"[.\"']{pattern.pattern}", code):
                found.append(f"sluice/{path}: {part} of app {app!r}")
    assert found == []
