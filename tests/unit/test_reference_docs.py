"""docs/reference/*.md are what the code says now (``make reference`` writes them), and the
comparison catches a change of the code the pages do not show yet."""

from __future__ import annotations

import argparse
import dataclasses
import types
from collections.abc import Callable
from typing import ClassVar

import pytest

import sluice.app
import sluice.app.advanced
import sluice.app.testing
from sluice.app.assembly import default_apps
from sluice.config import AppValues, Config
from sluice.events import Event
from sluice.telemetry.prometheus import Described
from tools.reference import generate, stale
from tools.reference.app_api import Module
from tools.reference.cli import commands
from tools.reference.sources import Sources, current
from tools.reference.undocumented import Undocumented


@pytest.fixture(scope="module")
def sources() -> Sources:
    return current()


def test_the_committed_pages_are_what_the_code_generates(sources: Sources) -> None:
    differences = stale(generate(sources))
    assert differences == [], "\n".join([*differences, "run `make reference` and commit"])


class WiderConfig(Config, frozen=True, kw_only=True):
    brand_new_knob: int = 3


KNOB = "# Widgets made per second, at most.\nSLUICE_BRAND_NEW_KNOB=3\n"


class LinkArchived(Event, frozen=True, kw_only=True, tag=True):
    """A link was put away for good."""

    aggregate: ClassVar[str] = "links"
    code: str


def _with_command(sources: Sources) -> Sources:
    parser = sources.parser
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub.add_parser(
        "frobnicate",
        help="frobnicate the widgets",
        description="Frobnicate the widgets.",
        epilog="docs:  docs/reference/cli.md#sluice-frobnicate",
    )
    return sources


def _with_route(sources: Sources) -> Sources:
    document = dict(sources.document)
    operation = {
        "tags": ["links"],
        "summary": "Archive a link",
        "responses": {"204": {"description": "archived"}},
    }
    document["paths"] = {**document["paths"], "/v1/links/{code}/archive": {"post": operation}}
    return dataclasses.replace(sources, document=document)


async def archive_order(order_id: str) -> None:
    """Put an order away for good."""


async def forget_order(order_id: str) -> None:
    pass


class OrderShelf:
    """Where archived orders are kept."""

    def find(self, order_id: str) -> str:
        return order_id


def _with_public(
    name: str, obj: object, module: types.ModuleType = sluice.app, apps: str = ""
) -> Callable[[Sources], Sources]:
    """``sources`` with ``name`` added to ``module``'s ``__all__`` (to
    ``sluice.app.advanced``'s: as if the comment above its import named ``apps``)."""

    def alter(sources: Sources) -> Sources:
        public = types.ModuleType(module.__name__)
        public.__dict__.update(vars(module))
        setattr(public, name, obj)
        public.__all__ = [*module.__all__, name]
        modules = list(sources.public)
        [index] = [i for i, m in enumerate(modules) if m.name == module.__name__]
        used_by = modules[index].used_by
        if used_by is not None:
            used_by = {**used_by, name: apps} if apps else used_by
        modules[index] = Module(module.__name__, public, used_by)
        return dataclasses.replace(sources, public=modules)

    return alter


# Each change the code may make, and what the stale page must name.
CHANGES: dict[str, tuple[Callable[[Sources], Sources], str, str]] = {
    "setting": (
        lambda s: dataclasses.replace(s, config=WiderConfig, env_example=s.env_example + KNOB),
        "configuration.md",
        "SLUICE_BRAND_NEW_KNOB",
    ),
    "command": (_with_command, "cli.md", "sluice frobnicate"),
    "event": (
        lambda s: dataclasses.replace(s, events=s.events | LinkArchived),
        "events.md",
        "LinkArchived",
    ),
    "metric": (
        lambda s: dataclasses.replace(
            s,
            metrics=[
                *s.metrics,
                Described("sluice_widgets", "counter", ("kind",), "Widgets made", scraped=False),
            ],
        ),
        "metrics.md",
        "sluice_widgets_total",
    ),
    "route": (_with_route, "http-api.md", "POST /v1/links/{code}/archive"),
    "app API name": (_with_public("archive_order", archive_order), "app-api.md", "archive_order"),
    "advanced name": (
        _with_public("archive_order", archive_order, sluice.app.advanced, "orders"),
        "app-api.md",
        "| `archive_order` | function | Put an order away for good. | orders |",
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_of_the_code_makes_its_page_stale_naming_what_is_missing(change: str) -> None:
    """A fresh ``current()`` each time: the command case adds to its parser."""
    alter, page, name = CHANGES[change]
    differences = stale(generate(alter(current())))
    assert len(differences) == 1, differences
    [difference] = differences
    assert difference.startswith(f"docs/reference/{page} is stale")
    assert name in difference


class UndescribedEvent(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "links"


def _command_without_help(sources: Sources) -> Sources:
    [sub] = [a for a in sources.parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub.add_parser("mystery")
    return sources


# What generation refuses: something the code has and its description lacks.
REFUSED: dict[str, tuple[Callable[[Sources], Sources], str]] = {
    "setting not in .env.example": (
        lambda s: dataclasses.replace(s, config=WiderConfig),
        "SLUICE_BRAND_NEW_KNOB is a setting of the config that .env.example does not describe",
    ),
    "setting without a comment": (
        lambda s: dataclasses.replace(
            s, config=WiderConfig, env_example=s.env_example + "\nSLUICE_BRAND_NEW_KNOB=3\n"
        ),
        "SLUICE_BRAND_NEW_KNOB has no comment saying what it means",
    ),
    "default written differently": (
        lambda s: dataclasses.replace(
            s,
            env_example=s.env_example.replace(
                "SLUICE_PROJECTION_BATCH=1000", "SLUICE_PROJECTION_BATCH=500"
            ),
        ),
        "SLUICE_PROJECTION_BATCH: .env.example sets '500', but the config's default is 1000",
    ),
    "variable nothing reads": (
        lambda s: dataclasses.replace(s, env_example=s.env_example + "# Gone.\nSLUICE_GONE=1\n"),
        "SLUICE_GONE is in .env.example, but no setting or module reads it",
    ),
    "command without a description": (
        _command_without_help,
        "`sluice mystery` has no description (what it does, in one line)",
    ),
    "event without a docstring": (
        lambda s: dataclasses.replace(s, events=s.events | UndescribedEvent),
        "UndescribedEvent has no docstring",
    ),
    "app API name without a docstring": (
        _with_public("forget_order", forget_order),
        "function forget_order has no docstring",
    ),
    "advanced name without a docstring": (
        _with_public("forget_order", forget_order, sluice.app.advanced, "orders"),
        "function forget_order of sluice.app.advanced has no docstring",
    ),
    "advanced class with a method without a docstring": (
        _with_public("OrderShelf", OrderShelf, sluice.app.advanced, "orders"),
        "OrderShelf.find of sluice.app.advanced has no docstring",
    ),
    "advanced name without the apps that use it": (
        _with_public("archive_order", archive_order, sluice.app.advanced),
        "archive_order of sluice.app.advanced has no comment naming its apps",
    ),
    "metric made past the catalogue": (
        lambda s: dataclasses.replace(s, registered=[*s.registered, "sluice_rogue"]),
        "sluice_rogue is registered with prometheus-client "
        "but not declared in sluice.telemetry.prometheus",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_generation_refuses_what_the_code_has_and_its_description_lacks(case: str) -> None:
    alter, problem = REFUSED[case]
    with pytest.raises(Undocumented) as refused:
        generate(alter(current()))
    assert problem in refused.value.problems


def test_every_command_is_on_the_cli_page(sources: Sources) -> None:
    page = generate(sources)["cli.md"]
    for command in commands(sources.parser):
        level = "#" * (command.prog.count(" ") + 1)
        assert f"\n{level} {command.prog}\n" in page


def test_every_setting_is_on_the_configuration_page(sources: Sources) -> None:
    page = generate(sources)["configuration.md"]
    defaults = Config()
    for name in Config.__struct_fields__:
        value = getattr(defaults, name)
        # Not the SLUICE_<NAME>_... ones, nor the field that holds the apps' settings.
        if not isinstance(value, dict | AppValues):
            assert f"### `SLUICE_{name.upper()}`" in page
    # Every built-in app's settings, read from the app as loaded.
    for app in default_apps().apps:
        for name in app.settings.__struct_fields__ if app.settings else ():
            assert f"### `SLUICE_{name.upper()}`" in page
            assert f"a setting of the `{app.name}` app" in page


def test_every_name_an_app_may_import_is_on_the_app_api_page(sources: Sources) -> None:
    page = generate(sources)["app-api.md"]
    for module in (sluice.app, sluice.app.testing):
        for name in module.__all__:
            assert f"\n### `{name}`\n" in page, name
    # The plugin's fixtures, which no __all__ lists, and the methods of what views and
    # handlers are handed.
    for heading in ("sluice_config` (fixture)", "Store.transaction", "Tx.append", "Tx.execute"):
        assert f"`{heading}" in page, heading
    # The lower-level names: a row each, with what it is and the apps that use it.
    advanced = page[page.index("\n## `sluice.app.advanced`\n") :]
    for name in sluice.app.advanced.__all__:
        assert f"\n| `{name}` | " in advanced, name
    assert "| `KEYS` | value | The Redis key and stream names" in advanced
