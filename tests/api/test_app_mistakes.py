"""An app's mistakes are refused before they reach the history: an event type no loaded
app declares is never committed (docs/guides/write-an-app.md, "What is checked, and when")."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.config import Config
from sluice.event_registry import UndeclaredEvent
from sluice.http import create_app
from sluice.http.keys import STORE
from tests.api.conftest import AiohttpClient
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
