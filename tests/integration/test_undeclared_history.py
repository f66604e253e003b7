"""Events of a type no app declared, committed by an older release, stay in the history:
what docs/guides/troubleshooting.md ("Events of an undeclared type") tells an operator
to do works. They are found in the dead letters they made, and once the type is declared
and the workers restarted, those are redriven and handled."""

from __future__ import annotations

from collections.abc import Callable

from sluice.app.assembly import open_resources
from sluice.app.testing import Child, sluice_command, wait_for
from sluice.config import Config
from sluice.events import new_trace_id, utcnow, uuid7
from sluice.records.dead_letters import list_dead_letters
from tests.app_helpers import AppDir

NOTES = """
from typing import ClassVar
from sluice.app import App, Event, HandlerContext, Tx

app = App("notes")
app.aggregate("notes", key="note_id")
app.migration(1, "notes", "CREATE TABLE notes_seen (id TEXT PRIMARY KEY)")


@app.event
class NoteWritten(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "notes"
    note_id: str


group = app.group("notes-group", max_deliveries=2, retry_base_ms=20)


@group.once(NoteWritten)
async def seen(event: NoteWritten, tx: Tx, ctx: HandlerContext) -> None:
    await tx.execute("INSERT INTO notes_seen VALUES (?)", (event.note_id,))
"""

DECLARED = (
    NOTES
    + """

@app.event
class NoteForgotten(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "notes"
    note_id: str


@group.once(NoteForgotten)
async def forgotten(event: NoteForgotten, tx: Tx, ctx: HandlerContext) -> None:
    await tx.execute("INSERT INTO notes_seen VALUES (?)", ("forgotten " + event.note_id,))
"""
)


async def test_undeclared_events_in_a_history_are_found_then_declared_and_redriven(
    app_dir: AppDir, make_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    app_dir.module("notes_app", NOTES)
    config = make_config(apps="default,notes_app")
    async with open_resources(config) as resources:
        store = resources.store
        async with store.transaction() as tx:  # as an older release let it in
            await tx.execute(
                "INSERT INTO events (event_id, type, aggregate, payload, trace_id, created_at)"
                " VALUES (?, 'NoteForgotten', 'notes', ?, ?, ?)",
                (
                    uuid7(),
                    b'{"type":"NoteForgotten","note_id":"n1"}',
                    new_trace_id(),
                    utcnow().isoformat(),
                ),
            )
        relay = sluice_spawn(config, "relay")
        worker = sluice_spawn(config, "worker", "notes-group")

        async def dead_lettered() -> bool:
            letters = await list_dead_letters(resources.redis, resources.keys, ["notes-group"], 10)
            return [d.event_type for d in letters] == ["NoteForgotten"]

        await wait_for(dead_lettered, timeout=60)
        # Found in the dead letters, with their type's name; event search knows declared
        # types only.
        found = await sluice_command(config, "dlq", "list", "--group", "notes-group")
        assert found.returncode == 0, found.stderr
        assert "NoteForgotten" in found.stdout
        unseen = await sluice_command(config, "events", "--aggregate", "notes")
        assert "NoteForgotten" not in unseen.stdout
        refused = await sluice_command(config, "events", "--type", "NoteForgotten")
        assert refused.returncode == 2
        assert "'NoteForgotten' is not an event type" in refused.stderr
        # Declared (the deployment's new release), the workers restarted, then redriven.
        worker.kill()
        app_dir.forget()
        app_dir.module("notes_app", DECLARED)
        worker = sluice_spawn(config, "worker", "notes-group")
        redriven = await sluice_command(config, "dlq", "redrive", "--type", "NoteForgotten")
        assert redriven.returncode == 0, redriven.stderr

        async def handled() -> bool:
            rows = await store.fetchall("SELECT id FROM notes_seen")
            return rows == [("forgotten n1",)]

        await wait_for(handled, timeout=60)
        assert not await dead_lettered()
        searched = await sluice_command(config, "events", "--type", "NoteForgotten")
        assert searched.returncode == 0, searched.stderr
        assert "NoteForgotten" in searched.stdout
        relay.kill()
