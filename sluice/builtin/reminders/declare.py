"""What the reminders app declares on its ``App`` beyond its event types: its routes
(reminders, their edits, the one-click unsubscribe of their mails), the API context of
their upcoming runs, the scheduler services that fire them (cron reminders, and
one-shots through the core's due runner), the purge of old occurrence rows; its handler
in the accounts app's ``mail`` group is declared on that group (``reminders.mail``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta

from aiohttp import web

from sluice.app import Resources, Store, db_time
from sluice.app.advanced import OneShotRunner
from sluice.builtin.reminders import (
    mail,  # noqa: F401  (joins the accounts app's mail group)
    one_shots,
)
from sluice.builtin.reminders.app import app
from sluice.builtin.reminders.cron_runner import ReminderRunner
from sluice.builtin.reminders.http import reminder_edits, reminders, unsubscribe
from sluice.builtin.reminders.http.keys import UPCOMING
from sluice.builtin.reminders.upcoming import NextRuns
from sluice.builtin.tags import tagged

# An occurrence row only guards against firing its slot twice, which nobody tries once
# the slot is older than the catch-up window (minutes); kept a week for the record.
OCCURRENCES_KEPT_DAYS = 7
PURGE_BATCH = 1000

app.add_routes(tagged((*unsubscribe.ROUTES, *reminders.ROUTES, *reminder_edits.ROUTES)))
app.tag("reminders", "A user's reminders: recurring (cron) or one-shot")


@app.api_context
async def upcoming_runs(web_app: web.Application) -> AsyncIterator[None]:
    """Reminders' next runs: cached windows, and the one worker thread for cron work."""
    web_app[UPCOMING] = NextRuns()
    yield


@app.scheduler_service
def cron_reminders(resources: Resources, holder: str) -> ReminderRunner:
    return ReminderRunner(resources, holder=holder)


@app.scheduler_service
def one_shot_reminders(resources: Resources, holder: str) -> OneShotRunner:
    return OneShotRunner(resources, holder=holder, due=one_shots.DUE)


@app.purge
async def occurrences(store: Store, now: datetime) -> Mapping[str, int]:
    """Reminder occurrence rows older than ``OCCURRENCES_KEPT_DAYS``."""
    before = db_time(now - timedelta(days=OCCURRENCES_KEPT_DAYS))
    occurrences = 0
    while True:
        async with store.transaction() as tx:
            deleted = await tx.execute(
                "DELETE FROM reminder_occurrences WHERE (reminder_id, scheduled_for) IN"
                " (SELECT reminder_id, scheduled_for FROM reminder_occurrences"
                "  WHERE scheduled_for < ? LIMIT ?)",
                (before, PURGE_BATCH),
            )
        occurrences += deleted
        if deleted < PURGE_BATCH:
            return {"reminder_occurrences": occurrences}
