"""Every process of a deployment runs the deployment's apps (docs/guides/write-an-app.md,
"Add or remove an app").

The issue this answers: a scheduler started without an app ran without its task, and
``sluice dlq list`` without the app printed nothing while the app's group held dead
letters. Now the first process records the apps it loads in the database; a process of
any kind that loads another set is refused at start naming the difference; the set
changes only with ``sluice migrate --change-apps``; and ``sluice dlq list`` lists the
dead letters of groups no loaded app declares, saying so.
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.app.assembly import open_resources
from sluice.app.testing import Child, free_port, sluice_command, wait_for
from sluice.config import Config
from sluice.events import EVENT_TYPES
from sluice.records.dead_letters import list_dead_letters
from tests.app_helpers import AppDir

NOTES = """
from typing import ClassVar
from sluice.app import App, Event, HandlerContext, TaskContext

app = App("notes")
app.aggregate("notes", key="note_id")


@app.event
class NoteWritten(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "notes"
    note_id: str


group = app.group("notes-group", max_deliveries=2, retry_base_ms=20)


@group.on(NoteWritten)
async def refuse(event: NoteWritten, ctx: HandlerContext) -> None:
    raise RuntimeError("a poison note")


@app.task("notes-digest", cron="0 0 6 * * *")
async def digest(ctx: TaskContext) -> None:
    pass
"""

REFUSED = "this process's apps (SLUICE_APPS) are not the deployment's"


async def test_a_process_with_other_apps_is_refused_until_the_set_is_changed_on_purpose(
    app_dir: AppDir, make_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    app_dir.module("notes_app", NOTES)
    deployment = make_config(apps="default,notes_app")
    without = make_config(apps="default")
    async with open_resources(deployment) as resources:  # the first start records the set
        note = EVENT_TYPES["NoteWritten"](note_id="n1")  # type: ignore[call-arg]
        async with resources.store.transaction() as tx:
            await tx.append(note)
        relay = sluice_spawn(deployment, "relay")
        worker = sluice_spawn(deployment, "worker", "notes-group")

        async def dead_lettered() -> bool:
            letters = await list_dead_letters(resources.redis, resources.keys, ["notes-group"], 10)
            return [d.event_type for d in letters] == ["NoteWritten"]

        await wait_for(dead_lettered, timeout=60)
        relay.kill()
        worker.kill()

    # Without the app: the scheduler (which would skip its task) and the dead-letter list
    # (which would miss its group) are refused at start, naming what differs.
    for command in (("scheduler",), ("dlq", "list"), ("relay",), ("api",), ("migrate",)):
        refused = await sluice_command(without, *command)
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        assert REFUSED in refused.stderr, (command, refused.stderr)
        assert "it does not load notes" in refused.stderr, refused.stderr
        assert "sluice migrate --change-apps" in refused.stderr
    # The deployment's own set is still welcome.
    listed = await sluice_command(deployment, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "notes-group" in listed.stdout

    # Changed on purpose: the app leaves the deployment.
    changed = await sluice_command(without, "migrate", "--change-apps")
    assert changed.returncode == 0, changed.stderr
    assert "the deployment's apps: accounts, links, reminders, articles, operations" in (
        changed.stdout
    )
    assert "notes" not in changed.stdout
    # Its group's dead letters are still listed, said to belong to no loaded app.
    listed = await sluice_command(without, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert "notes-group" in listed.stdout and "NoteWritten" in listed.stdout
    assert "group notes-group holds dead letters, and no app loaded declares it" in listed.stderr
    # And dropped by its group's name once the operator is done with it.
    [dead_id] = [line.split()[1] for line in listed.stdout.splitlines() if "notes-group" in line]
    dropped = await sluice_command(without, "dlq", "drop", "notes-group", dead_id)
    assert dropped.returncode == 0, dropped.stderr
    listed = await sluice_command(without, "dlq", "list")
    assert "notes-group" not in listed.stdout + listed.stderr
    # And now a process that still loads the app is the odd one out.
    refused = await sluice_command(deployment, "worker", "notes-group")
    assert refused.returncode == 2
    assert "it loads notes, which the deployment does not run" in refused.stderr


async def test_up_with_other_apps_stops_before_the_token_and_redis(
    make_config: Callable[..., Config],
) -> None:
    # A deployment of every built-in app, then `sluice up` with two of them: refused
    # before it makes and shows the one-time admin token or starts its embedded Redis.
    await sluice_command(make_config(), "migrate")
    config = make_config(apps="links,accounts", port=free_port(), redis_url=None)
    done = await sluice_command(config, "up", timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert REFUSED in done.stderr and "it does not load" in done.stderr
    assert not (config.data_dir / "admin.token").exists()
    assert not (config.data_dir / "redis").exists()
