"""Which apps a process runs (SLUICE_APPS, the ``sluice.apps`` entry points), and what two
apps cannot both claim: refused at start, with a message naming both."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sluice.app.assembly import assemble
from sluice.app.loading import load_apps
from sluice.config import load_config
from sluice.errors import ConfigError
from sluice.events import EVENT_TYPES, REGISTRY
from tests.app_helpers import AppDir

TINY = """
from typing import ClassVar
from sluice.app import App, Event, HandlerContext

app = App("tiny")
app.aggregate("tiny-things", key="thing_id")

@app.event
class TinyThingHappened(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "tiny-things"
    thing_id: str

tiny = app.group("tiny-group", max_deliveries=3)

@tiny.on(TinyThingHappened)
async def noticed(event: TinyThingHappened, ctx: HandlerContext) -> None:
    pass
"""


def _clash(app: str, event: str = "OrderPlaced") -> str:
    return f"""
from typing import ClassVar
from sluice.app import App, Event

app = App("{app}")
app.aggregate("{app}-orders", key="order_id")

@app.event
class {event}(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "{app}-orders"
    order_id: str
"""


def _apps(names: str) -> list[str]:
    return load_apps(load_config({"SLUICE_APPS": names})).names()


def test_an_app_named_in_sluice_apps_joins_the_built_in_ones(app_dir: AppDir) -> None:
    app_dir.module("tiny_app", TINY)
    config = load_config({"SLUICE_APPS": "default,tiny_app"})
    registered = dict(REGISTRY.owners)
    apps = load_apps(config)
    assert apps.names() == ["accounts", "links", "reminders", "articles", "operations", "tiny"]
    assert "tiny-group" in apps.groups and "article-views" in apps.groups
    assert REGISTRY.owners == registered  # loading registers nothing: the assembly does
    assert assemble(config).apps.names() == apps.names()
    assert EVENT_TYPES["TinyThingHappened"].__module__ == "tiny_app"
    assert REGISTRY.owners["TinyThingHappened"] == "tiny"
    assert _apps("tiny_app:app") == ["tiny"]  # alone: without the built-in ones


def test_an_installed_app_is_loaded_by_its_entry_point(app_dir: AppDir) -> None:
    app_dir.module("tiny_app", TINY)
    app_dir.entry_point("tiny-dist", "tiny", "tiny_app:app")
    # The default: built in, and installed.
    assert _apps("") == ["accounts", "links", "reminders", "articles", "operations", "tiny"]
    assert _apps("tiny") == ["tiny"]  # by the entry point's name
    # A process started in that environment finds it too, with no SLUICE_APPS at all.
    listed = subprocess.run(
        [sys.executable, "-m", "sluice", "groups", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_child_env(app_dir), "SLUICE_DATA_DIR": str(app_dir.root / "data")},
    )
    assert listed.returncode == 0, listed.stderr
    assert "tiny-group" in listed.stdout


def _child_env(app_dir: AppDir) -> dict[str, str]:
    """This process's environment (with the apps' directory on PYTHONPATH), without its
    own SLUICE_ settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}


def test_two_apps_declaring_one_event_type_are_refused_naming_both(app_dir: AppDir) -> None:
    app_dir.module("shop_one", _clash("shop-one"))
    app_dir.module("shop_two", _clash("shop-two"))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "shop_one,shop_two"}))
    message = str(refused.value)
    assert "'OrderPlaced'" in message and "shop-one" in message and "shop-two" in message
    assert "OrderPlaced" not in EVENT_TYPES  # nothing of either was registered
    # At start: the process says so and stops before doing anything.
    started = subprocess.run(
        [sys.executable, "-m", "sluice", "groups", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **_child_env(app_dir),
            "SLUICE_APPS": "shop_one,shop_two",
            "SLUICE_DATA_DIR": str(app_dir.root / "data"),
        },
    )
    assert started.returncode == 2
    assert "declared by shop-one and by shop-two" in started.stderr


def test_an_app_cannot_take_sluice_s_own_event_types_or_names(app_dir: AppDir) -> None:
    app_dir.module("thief", _clash("thief", event="LinkVisited"))
    with pytest.raises(ConfigError, match="'LinkVisited' is declared by links and by thief"):
        _apps("default,thief")
    app_dir.module(
        "mailer",
        """
        from sluice.app import App
        app = App("mailer")
        app.group("mail")
    """,
    )
    with pytest.raises(ConfigError, match="group 'mail' is declared by accounts and by mailer"):
        _apps("default,mailer")
    app_dir.module(
        "router",
        """
        from sluice.app import App
        app = App("router")

        @app.route("GET", "/healthz", doc={"responses": {}})
        async def mine(request): ...
    """,
    )
    with pytest.raises(ConfigError, match="route 'GET /healthz' is declared by sluice and by"):
        _apps("router")


def test_a_second_fast_path_is_refused_naming_both_apps(app_dir: AppDir) -> None:
    app_dir.module(
        "shortcut",
        """
        from sluice.app import App
        app = App("shortcut")
        app.fast_path(lambda web_app: None)
    """,
    )
    with pytest.raises(ConfigError, match="declared by links and by shortcut"):
        _apps("default,shortcut")
    assert _apps("shortcut") == ["shortcut"]  # alone, it is the deployment's one


def test_names_apps_and_requirements_that_cannot_be_loaded_are_refused(app_dir: AppDir) -> None:
    with pytest.raises(ConfigError, match="no built-in or installed app's name"):
        _apps("no_such_app")
    app_dir.module(
        "needy",
        """
        from sluice.app import App
        app = App("needy", requires=("no-such-app",))
    """,
    )
    with pytest.raises(ConfigError, match="no app named 'no-such-app'"):
        _apps("needy")
    app_dir.module(
        "chicken", 'from sluice.app import App\napp = App("chicken", requires=("egg",))\n'
    )
    app_dir.module("egg", 'from sluice.app import App\napp = App("egg", requires=("chicken",))\n')
    app_dir.entry_point("farm", "chicken", "chicken:app")
    app_dir.entry_point("farm2", "egg", "egg:app")
    with pytest.raises(ConfigError, match="apps require each other"):
        _apps("chicken")


def test_a_required_app_is_loaded_first_even_unnamed(app_dir: AppDir) -> None:
    app_dir.module("base_app", 'from sluice.app import App\napp = App("base")\n')
    app_dir.module("top_app", 'from sluice.app import App\napp = App("top", requires=("base",))\n')
    app_dir.entry_point("base-dist", "base", "base_app:app")
    assert _apps("top_app") == ["base", "top"]


def test_an_event_at_version_2_without_its_upcaster_is_refused(app_dir: AppDir) -> None:
    app_dir.module(
        "versioned",
        """
        from typing import ClassVar
        from sluice.app import App, Event
        app = App("versioned")
        app.aggregate("things", key="thing_id")

        @app.event
        class ThingRenamed(Event, frozen=True, kw_only=True, tag=True):
            aggregate: ClassVar[str] = "things"
            v: int = 3
            thing_id: str

        @app.upcaster(ThingRenamed, from_version=1)
        def up(payload):
            return payload
    """,
    )
    with pytest.raises(ConfigError, match=r"ThingRenamed is at version 3.*missing \[2\]"):
        _apps("versioned")
