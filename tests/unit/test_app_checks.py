"""What an app declares wrong is refused where it is declared or loaded, naming the app and
the thing: a function of the wrong shape, a handler of an event type no loaded app
declares, a table another owner creates, a route that would answer every short link."""

from __future__ import annotations

import sys
from textwrap import dedent
from typing import Any

import pytest

from sluice.app import assembly
from sluice.app.loading import load_apps
from sluice.config import load_config
from sluice.errors import ConfigError
from tests.app_helpers import AppDir

HEAD = """
from typing import ClassVar, Sequence
import msgspec
from aiohttp import web
from sluice.app import App, Event

app = App("shapes")
app.aggregate("shapes", key="shape_id")

@app.event
class ShapeDrawn(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "shapes"
    shape_id: str

class Redraw(msgspec.Struct):
    shape_id: str

group = app.group("shape-group")
"""

PROJECTION = """
projection = app.projection("shape-totals", events=(ShapeDrawn,),
                            schema="CREATE TABLE shape_totals{s} (n INTEGER)",
                            tables=("shape_totals",))
"""

# Each wrong declaration, and what the refusal says about the function.
WRONG = {
    "once, a plain def": (
        "@group.once(ShapeDrawn)\ndef h(event, tx, ctx):\n    pass",
        "group 'shape-group', @once(ShapeDrawn): shapes_app.h must be"
        " `async def h(event, tx, ctx)`; it is a plain def",
    ),
    "once, two parameters": (
        "@group.once(ShapeDrawn)\nasync def h(event, ctx):\n    pass",
        "group 'shape-group', @once(ShapeDrawn): shapes_app.h must be"
        " `async def h(event, tx, ctx)`; it takes (event, ctx)",
    ),
    "on, three parameters": (
        "@group.on(ShapeDrawn)\nasync def h(event, tx, ctx):\n    pass",
        "group 'shape-group', @on(ShapeDrawn): shapes_app.h must be `async def h(event, ctx)`;"
        " it takes (event, tx, ctx)",
    ),
    "a projection's apply, a plain def": (
        PROJECTION + "@projection.apply\ndef h(events, tx, ctx):\n    pass",
        "projection 'shape-totals', @apply: shapes_app.h must be `async def h(events, tx, ctx)`",
    ),
    "publish, a required keyword": (
        PROJECTION + "@projection.apply\nasync def apply(events, tx, ctx):\n    pass\n"
        "@projection.publish\nasync def h(events, resources, *, extra):\n    pass",
        "projection 'shape-totals', @publish: shapes_app.h must be"
        " `async def h(events, resources)`",
    ),
    "a task, no parameter": (
        "@app.task('shape-task', cron='0 0 0 * * *')\nasync def h():\n    pass",
        "task 'shape-task': shapes_app.h must be `async def h(ctx)`; it takes ()",
    ),
    "a job, a plain def": (
        "@app.job('redraw', payload=Redraw)\ndef h(job, tx, ctx):\n    pass",
        "job 'redraw': shapes_app.h must be `async def h(payload, tx, ctx)`; it is a plain def",
    ),
    "a route, a plain def": (
        "@app.route('GET', '/v1/shapes', doc={})\ndef h(request):\n    pass",
        "route GET /v1/shapes: shapes_app.h must be `async def h(request)`; it is a plain def",
    ),
    "an upcaster, an async def": (
        "@app.event\nclass ShapeMoved(Event, frozen=True, kw_only=True, tag=True):\n"
        "    aggregate: ClassVar[str] = 'shapes'\n    shape_id: str\n    v: int = 2\n"
        "@app.upcaster(ShapeMoved, from_version=1)\nasync def h(payload):\n    return payload",
        "@upcaster(ShapeMoved, from_version=1): shapes_app.h must be `def h(payload)`;"
        " it is an async def",
    ),
    "an api context, a plain coroutine": (
        "@app.api_context\nasync def h(app):\n    pass",
        "api_context shapes_app.h must be an `async def` that yields once",
    ),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_function_of_the_wrong_shape_is_refused_where_it_is_declared(
    app_dir: AppDir, case: str
) -> None:
    declaration, said = WRONG[case]
    app_dir.module("shapes_app", HEAD + "\n" + dedent(declaration) + "\n")
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "shapes_app"}))
    message = str(refused.value)
    assert message.startswith("SLUICE_APPS entry 'shapes_app' failed to load: TypeError:")
    assert f"app 'shapes': {said}" in message, message
    assert "/apps/shapes_app.py:" in message  # the app's own line, not sluice's


def test_right_shapes_of_every_kind_load(app_dir: AppDir) -> None:
    app_dir.module(
        "shapes_app",
        HEAD
        + PROJECTION
        + dedent("""
        @group.once(ShapeDrawn)
        async def once(event, tx, ctx=None): pass

        @group.on(ShapeDrawn)
        async def on(*args): pass

        @projection.apply
        async def apply(events, tx, ctx): pass

        @app.task("shape-task", cron="0 0 0 * * *")
        async def task(ctx): pass

        @app.job("redraw", payload=Redraw)
        async def redraw(job, tx, ctx): pass

        @app.route("GET", "/v1/shapes", doc={})
        async def view(request): return web.Response()

        class Shapes(web.View):
            async def get(self): return web.Response()

        app.route("GET", "/v1/shape-views", doc={})(Shapes)
    """).replace("@group.on(ShapeDrawn)", "@app.group('shape-others').on(ShapeDrawn)"),
    )
    apps = load_apps(load_config({"SLUICE_APPS": "shapes_app"}))
    assert {"shape-group", "shape-others", "shape-totals"} <= set(apps.groups)


# Release 3's order: what they write in (or with) first, by the parameter's name or its
# annotation.
RELEASE_3 = """
calls = []

@projection.apply
async def apply(tx, events, ctx):
    calls.append(("apply", tx, events, ctx.suffix))

@projection.apply_payloads
async def payloads(writer: "Tx", payloads, ctx):
    calls.append(("apply_payloads", writer, payloads, ctx.suffix))

@projection.publish
async def publish(resources, events):
    calls.append(("publish", resources, events))
"""


async def test_a_projection_in_release_3s_order_runs_with_a_warning_naming_the_new_one(
    app_dir: AppDir,
) -> None:
    app_dir.module("shapes_app", HEAD + PROJECTION + RELEASE_3)
    with pytest.warns(DeprecationWarning) as warned:
        apps = load_apps(load_config({"SLUICE_APPS": "shapes_app"}))
    said = {str(w.message).split(": ")[1].split(", ")[1]: str(w.message) for w in warned}
    assert sorted(said) == ["@apply", "@apply_payloads", "@publish"]
    assert said["@apply"].startswith(
        "app 'shapes': projection 'shape-totals', @apply: shapes_app.apply takes"
        " (tx, events, ctx), release 3's order, which sluice still swaps:"
    )
    assert "declare it `async def apply(events, tx, ctx)`" in said["@apply"]
    assert "`async def payloads(payloads, tx, ctx)`" in said["@apply_payloads"]
    assert "`async def publish(events, resources)`" in said["@publish"]
    assert {w.filename.rpartition("/")[2] for w in warned} == {"shapes_app.py"}

    projection, config = apps.projections["shape-totals"], load_config({})
    tx: Any = object()
    resources: Any = object()
    await projection.apply(["drawn"], tx, "_g1", config)
    assert projection.apply_payloads is not None and projection.publish is not None
    await projection.apply_payloads(b"[]", tx, "_g1", config)
    await projection.publish(["drawn"], resources)
    assert sys.modules["shapes_app"].calls == [
        ("apply", tx, ["drawn"], "_g1"),
        ("apply_payloads", tx, b"[]", "_g1"),
        ("publish", resources, ["drawn"]),
    ]


UNDECLARED = """
from typing import ClassVar
from sluice.app import App, Event, HandlerContext

app = App("forgetful")
app.aggregate("forgotten", key="thing_id")

class ThingForgotten(Event, frozen=True, kw_only=True, tag=True):  # no @app.event
    aggregate: ClassVar[str] = "forgotten"
    thing_id: str

KIND
"""


@pytest.mark.parametrize("kind", ["group", "projection"])
def test_a_handler_of_an_event_type_no_loaded_app_declares_is_refused_at_start(
    app_dir: AppDir, kind: str
) -> None:
    declaration = {
        "group": "@app.group('forgetful-group').on(ThingForgotten)\n"
        "async def noticed(event: ThingForgotten, ctx: HandlerContext) -> None: ...",
        "projection": "@app.projection('forgotten-totals', events=(ThingForgotten,),"
        " schema='CREATE TABLE forgotten_totals{s} (n INTEGER)',"
        " tables=('forgotten_totals',)).apply\nasync def apply(events, tx, ctx): ...",
    }[kind]
    app_dir.module("forgetful_app", UNDECLARED.replace("KIND", declaration))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "default,forgetful_app"}))
    what = {"group": "group 'forgetful-group'", "projection": "projection 'forgotten-totals'"}
    assert str(refused.value).startswith(
        f"app 'forgetful': {what[kind]} handles ThingForgotten (forgetful_app), which no loaded"
        " app declares: declare it with @app.event"
    )


def _tables(app: str, table: str) -> str:
    return f"""
from sluice.app import App

app = App("{app}")
app.migration(1, "its table", "CREATE TABLE IF NOT EXISTS {table} (id TEXT PRIMARY KEY)")
"""


def test_a_table_two_apps_create_is_refused_naming_both(app_dir: AppDir) -> None:
    app_dir.module("shop_app", _tables("shop", "widgets"))
    app_dir.module("store_app", _tables("store", "Widgets"))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "shop_app,store_app"}))
    assert str(refused.value).startswith(
        "table 'widgets': app 'store' creates it (migration 1 'its table' of store),"
        " and app 'shop' (migration 1 of shop) does too"
    )
    # A projection's table against a built-in app's: named the same way.
    app_dir.module("stats_app", _tables("stats", "link_stats"))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "default,stats_app"}))
    assert str(refused.value).startswith(
        "table 'link_stats': app 'stats' creates it (migration 1 'its table' of stats),"
        " and app 'links' (migration 1 of projection:link-stats) does too"
    )


ROUTES = """
from aiohttp import web
from sluice.app import App

app = App("pages")

@app.route("GET", "PATH", doc={})
async def page(request: web.Request) -> web.Response:
    return web.Response(text="a page")
"""


def test_a_route_whose_first_segment_is_a_variable_outside_v1_is_refused(
    app_dir: AppDir,
) -> None:
    app_dir.module("pages_app", ROUTES.replace("PATH", "/{slug}/page"))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "default,pages_app"}))
    assert str(refused.value) == (
        "app 'pages': route GET /{slug}/page would answer every short link's path:"
        " serve it under /v1/ (or a fixed first segment)"
    )
    # A fixed first segment reserves that word for the short links' aliases.
    app_dir.forget()
    assembly.forget_loaded()
    app_dir.module("pages_app", ROUTES.replace("PATH", "/Launchpad/{slug}"))
    words = load_apps(load_config({"SLUICE_APPS": "default,pages_app"})).reserved_words
    assert words["launchpad"] == "route GET /Launchpad/{slug} of pages"


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ("priority=10", "job 'redraw': a job's priority is an int from 0 to 9, not 10"),
        ("debounce=timedelta(0)", "job 'redraw': debounce is a positive timedelta"),
        (
            "debounce=timedelta(minutes=5), max_wait=timedelta(minutes=1)",
            "job 'redraw': max_wait 0:01:00 is shorter than debounce 0:05:00",
        ),
    ],
)
def test_a_jobs_priority_debounce_and_max_wait_are_checked_where_it_is_declared(
    app_dir: AppDir, options: str, said: str
) -> None:
    declaration = f"""
        from datetime import timedelta

        @app.job('redraw', payload=Redraw, {options})
        async def redraw(job, tx, ctx): pass
    """
    app_dir.module("shapes_app", HEAD + dedent(declaration))
    with pytest.raises(ConfigError) as refused:
        load_apps(load_config({"SLUICE_APPS": "shapes_app"}))
    assert f"ValueError: app 'shapes': {said}" in str(refused.value), str(refused.value)
