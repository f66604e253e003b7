"""Where each page's facts come from: the one module that imports sluice's internals, each
through the function or object the code itself uses (the config struct and loader, the
argument parser, the event types of sluice and its built-in apps, the metrics catalogue,
the OpenAPI builder). When the package's layout changes, this is the file to follow it."""

from __future__ import annotations

import argparse
import functools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tools.reference.app_api import Module, import_comments

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Sources:
    config: type[msgspec.Struct]
    env_example: str
    load_config: Callable[[Mapping[str, str]], object]
    read_elsewhere: Callable[[str], bool]  # a variable some module reads by name
    parser: argparse.ArgumentParser
    events: Any  # the tagged union, A | B | ...: sluice's and the built-in apps' types
    stream_of: Callable[[str], str]  # an aggregate type's stream (default prefix)
    metrics: Sequence[Any]  # sluice.telemetry.prometheus.Described
    registered: Iterable[str]  # prometheus-client's family names
    document: Mapping[str, Any]  # the OpenAPI document
    public: Sequence[Any]  # tools.reference.app_api.Module: sluice.app, .testing, .advanced
    # (app name, its Settings struct) of every app a default deployment loads.
    app_settings: Sequence[tuple[str, type[msgspec.Struct]]] = ()


def _read_by_a_module(package: Path) -> Callable[[str], bool]:
    text = "\n".join(path.read_text("utf-8") for path in sorted(package.rglob("*.py")))
    return lambda name: f'"{name}"' in text


def current() -> Sources:
    """The sources as the code has them now."""
    from prometheus_client import REGISTRY

    import sluice
    import sluice.app
    import sluice.app.advanced
    import sluice.app.testing
    import sluice.http  # imports every module that declares a metric (what /metrics shows)
    from sluice.app.assembly import default_apps
    from sluice.cli.main import build_parser
    from sluice.config import Config, load_config
    from sluice.http.openapi import build_document
    from sluice.process.resources import keys_for
    from sluice.telemetry.prometheus import declared

    defaults = load_config({})
    return Sources(
        config=Config,
        env_example=(ROOT / ".env.example").read_text("utf-8"),
        load_config=load_config,
        read_elsewhere=_read_by_a_module(Path(sluice.__file__).parent),
        parser=build_parser(),
        events=functools.reduce(operator.or_, default_apps().event_types),
        stream_of=keys_for(defaults).stream,
        metrics=declared(),
        registered=[metric.name for metric in REGISTRY.collect()],
        document=build_document(defaults.base_url, default_apps()),
        public=[
            Module("sluice.app", sluice.app),
            Module("sluice.app.testing", sluice.app.testing),
            Module(
                "sluice.app.advanced",
                sluice.app.advanced,
                used_by=import_comments(sluice.app.advanced),
            ),
        ],
        app_settings=[(a.name, a.settings) for a in default_apps().apps if a.settings is not None],
    )
