"""The app API's decorators are typed: ``mypy --strict`` on an app's package, outside the
repository, reports a handler of the wrong event type or shape where it is declared, and
nothing on the right ones (docs/guides/write-an-app.md, "What is checked, and when")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import sluice

# Each block is one declaration; the blocks marked "# wrong" are the ones mypy must
# report, and only those.
APP = """\
from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec
from aiohttp import web

from sluice.app import (
    Aggregate, App, Event, HandlerContext, JobContext, Payload, ProjectionContext,
    TaskContext, Tx, applies,
)

app = App("typed")
app.aggregate("typed", key="thing_id")


@app.event
class ThingMade(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "typed"
    thing_id: str


@app.event
class ThingLost(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "typed"
    thing_id: str


class Remake(msgspec.Struct):
    thing_id: str


class Other(msgspec.Struct):
    name: str


group = app.group("typed-group")
totals = app.projection("typed-totals", events=(ThingMade,), schema="", tables=())


@group.once(ThingMade)
async def right_once(event: ThingMade, tx: Tx, ctx: HandlerContext) -> None:
    await tx.append(ThingLost(thing_id=event.thing_id))


@group.on(ThingLost)
async def right_on(event: Event, ctx: HandlerContext) -> None:  # a wider event type is fine
    ctx.log.info("lost", event_id=event.event_id)


@totals.apply
async def right_apply(events: Sequence[Event], tx: Tx, ctx: ProjectionContext) -> None:
    pass


@app.job("remake", payload=Remake)
async def right_job(job: Remake, tx: Tx, ctx: JobContext) -> None:
    pass


@app.task("typed-task", cron="0 0 0 * * *")
async def right_task(ctx: TaskContext) -> None:
    pass


@app.route("GET", "/v1/typed", doc={})
async def right_view(request: web.Request) -> web.Response:
    return web.Response()


@app.upcaster(ThingMade, from_version=1)
def right_upcaster(payload: Payload) -> Payload:
    return payload


# wrong: the handler takes another event type than it is declared for
@app.group("g2").once(ThingLost)
async def wrong_event(event: ThingMade, tx: Tx, ctx: HandlerContext) -> None:
    pass


# wrong: a plain def where sluice awaits
@app.group("g3").once(ThingMade)
def wrong_sync(event: ThingMade, tx: Tx, ctx: HandlerContext) -> None:
    pass


# wrong: an `on` handler gets no transaction
@app.group("g4").on(ThingMade)
async def wrong_shape(event: ThingMade, tx: Tx, ctx: HandlerContext) -> None:
    pass


# wrong: the job's payload type is not the one declared
@app.job("other", payload=Remake)
async def wrong_payload(job: Other, tx: Tx, ctx: JobContext) -> None:
    pass


# wrong: a task takes its context only
@app.task("typed-task-2", cron="0 0 0 * * *")
async def wrong_task(ctx: TaskContext, extra: int) -> None:
    pass


# wrong: a view is awaited
@app.route("GET", "/v1/typed-2", doc={})
def wrong_view(request: web.Request) -> web.Response:
    return web.Response()


# wrong: apply takes (events, tx, ctx)
@app.projection("typed-more", events=(ThingMade,), schema="", tables=()).apply
async def wrong_apply(tx: Tx, ctx: ProjectionContext) -> None:
    pass


# wrong: an upcaster is a plain def
@app.upcaster(ThingLost, from_version=1)
async def wrong_upcaster(payload: Payload) -> Payload:
    return payload


class RightThing(Aggregate):
    aggregate: ClassVar[str] = "typed"
    made: int = 0
    @applies(ThingMade)
    def _made(self, event: ThingMade) -> None:
        self.made += 1


# wrong: an aggregate's apply takes another event type than it is declared for
class WrongThing(Aggregate):
    aggregate: ClassVar[str] = "typed"
    @applies(ThingMade)
    def _lost(self, event: ThingLost) -> None:
        pass


def unused(value: Any) -> None:
    pass
"""


def _blocks(source: str) -> list[tuple[int, int, bool]]:
    """(first line, last line, marked wrong) of each blank-line separated block."""
    blocks, start, lines = [], 1, source.splitlines()
    for number, line in enumerate([*lines, ""], start=1):
        if not line.strip():
            if number > start:
                blocks.append((start, number - 1, lines[start - 1].startswith("# wrong")))
            start = number + 1
    return blocks


def test_mypy_strict_reports_the_wrong_handlers_of_an_app_and_only_them(tmp_path: Path) -> None:
    package = tmp_path / "typed_app"
    package.mkdir()
    (package / "__init__.py").write_text(APP)
    (package / "py.typed").write_text("")
    source = Path(sluice.__file__).parents[1]
    # The repository's cache (kept apart from `make lint`'s): the first run checks sluice
    # itself, later runs only the app. MYPYPATH: the sources of the sluice imported here,
    # whatever the install (an editable one is not followed by mypy).
    cache = source / ".mypy_cache" / "app-typing"
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--hide-error-context",
            "typed_app",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MYPYPATH": str(source)},
    )
    errors = [
        (int(m[1]), m[2])
        for m in re.finditer(r"^typed_app/__init__\.py:(\d+): error: (.*)$", checked.stdout, re.M)
    ]
    assert errors, checked.stdout + checked.stderr
    outside = [e for e in errors if not any(a <= e[0] <= b for a, b, _ in _blocks(APP))]
    assert outside == []
    flagged = {(a, b) for a, b, _ in _blocks(APP) if any(a <= e[0] <= b for e in errors)}
    wrong = {(a, b) for a, b, marked in _blocks(APP) if marked}
    assert flagged == wrong, "\n".join(f"{line}: {text}" for line, text in errors)
    assert len(wrong) == 9
