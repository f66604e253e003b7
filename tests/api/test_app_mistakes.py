"""An app's mistakes are refused before they reach the history or a user: an event type no
loaded app declares is never committed, and no app route outside ``/v1/`` shadows a short
link (docs/guides/write-an-app.md, "What is checked, and when")."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web

from sluice.app.assembly import create_app, migrate_store
from sluice.config import Config
from sluice.errors import ConfigError
from sluice.events.registry import UndeclaredEvent
from sluice.http.app_keys import STORE
from tests.api.helpers import AiohttpClient, problem, user_token
from tests.app_helpers import AppDir

TOKEN = "app-mistakes-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}

NOTES = """
from typing import ClassVar

from aiohttp import web
from sluice.app import App, Event, json_response, ok, store

app = App("notes")
app.aggregate("notes", key="note_id")
app.migration(1, "notes", "CREATE TABLE notes (id TEXT PRIMARY KEY)")


@app.event
class NoteWritten(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "notes"
    note_id: str


class NoteForgotten(Event, frozen=True, kw_only=True, tag=True):  # no @app.event
    aggregate: ClassVar[str] = "notes"
    note_id: str


@app.route("POST", "/v1/notes/{id}", doc={"operationId": "writeNote", "summary": "Write",
           "responses": {"201": {"description": "written"}}})
async def write(request: web.Request) -> web.Response:
    note_id = request.match_info["id"]
    async with store(request).transaction() as tx:
        await tx.execute("INSERT INTO notes VALUES (?)", (note_id,))
        await tx.append(NoteWritten(note_id=note_id), NoteForgotten(note_id=note_id))
    return json_response({"id": note_id}, 201)
"""


async def test_an_undeclared_event_type_is_refused_at_append_and_nothing_commits(
    app_dir: AppDir, aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    app_dir.module("notes_app", NOTES)
    client = await aiohttp_client(
        create_app(make_config(apps="default,notes_app", admin_token=TOKEN))
    )
    answer = await client.post("/v1/notes/n1")
    assert answer.status == 500, await answer.text()
    store = client.app[STORE]
    assert await store.fetchall("SELECT id FROM notes") == []
    for kind in ("NoteWritten", "NoteForgotten"):
        assert await store.fetchall("SELECT seq FROM events WHERE type = ?", (kind,)) == []
    # What the author is told: the type, and where to declare it.
    from notes_app import NoteForgotten, NoteWritten  # type: ignore[import-not-found]

    with pytest.raises(UndeclaredEvent) as refused:
        async with store.transaction() as tx:
            await tx.execute("INSERT INTO notes VALUES ('n2')")
            await tx.append(NoteWritten(note_id="n2"))
            await tx.append(NoteForgotten(note_id="n2"))
    assert "event type NoteForgotten (notes_app.NoteForgotten) is declared by no loaded app" in str(
        refused.value
    )
    assert "declare it with @app.event in app 'notes'" in str(refused.value)
    assert await store.fetchall("SELECT id FROM notes") == []
    assert await store.fetchall("SELECT seq FROM events WHERE type LIKE 'Note%'") == []


LAUNCHPAD = """
from aiohttp import web
from sluice.app import App

app = App("launch")


@app.route("GET", "/launchpad", doc={"operationId": "launchpad", "summary": "The launch page",
           "responses": {"200": {"description": "the page"}}})
async def launchpad(request: web.Request) -> web.Response:
    return web.Response(text="the launch page")
"""


async def test_an_alias_equal_to_an_app_route_s_first_segment_is_a_422(
    app_dir: AppDir, aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    app_dir.module("launch_app", LAUNCHPAD)
    client = await aiohttp_client(create_app(make_config(apps="default,launch_app")))
    auth = await user_token(client)
    for alias in ("launchpad", "LaunchPad"):
        refused = await problem(
            await client.post(
                "/v1/links", json={"url": "https://example.org/", "alias": alias}, headers=auth
            ),
            422,
        )
        assert refused["errors"] == [
            {
                "field": "alias",
                "message": f"is a reserved word: /{alias} would be the path of the route"
                " GET /launchpad of launch",
            }
        ]
    made = await client.post(
        "/v1/links", json={"url": "https://example.org/", "alias": "launchpads"}, headers=auth
    )
    assert made.status == 201, await made.text()
    assert (await client.get("/launchpads", allow_redirects=False)).status == 302
    page = await client.get("/launchpad", allow_redirects=False)
    assert (page.status, await page.text()) == (200, "the launch page")


async def test_a_link_an_app_route_would_shadow_stops_the_api_at_start_naming_both(
    app_dir: AppDir, aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    # The link was made before the app came, when the word was free.
    before = await aiohttp_client(create_app(make_config()))
    auth = await user_token(before)
    made = await before.post(
        "/v1/links", json={"url": "https://example.org/", "alias": "launchpad"}, headers=auth
    )
    assert made.status == 201, await made.text()
    await before.close()
    app_dir.module("launch_app", LAUNCHPAD)
    with_launch = make_config(apps="default,launch_app")
    await migrate_store(with_launch, change_apps=True)  # the app added on purpose
    runner = web.AppRunner(create_app(with_launch))
    try:
        with pytest.raises(ConfigError) as refused:
            await runner.setup()  # the API's start: its contexts, before it listens
    finally:
        await runner.cleanup()
    assert str(refused.value) == (
        "the short link 'launchpad' would be shadowed by route GET /launchpad of app 'launch':"
        " serve the route under /v1/ (links are never deleted, and its owner's short URL must"
        " keep working)"
    )
