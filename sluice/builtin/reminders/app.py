"""The ``reminders`` app object; the modules beside it declare its parts on it."""

from __future__ import annotations

from sluice.app import App
from sluice.builtin.reminders.keys import RemindersKeys
from sluice.builtin.reminders.settings import RemindersSettings

app = App(
    "reminders",
    keys=RemindersKeys,
    settings=RemindersSettings,
    requires=("accounts",),
    description="a user's reminders, recurring (cron) or one-shot, each occurrence mailed once",
)
