"""The deployment's apps: the names of the apps every process of one deployment runs,
kept in the database (``deployment_apps``) beside the migrations they made.

A process that ran without one of them would do its part silently without it: a
scheduler without the app's task never runs it, ``sluice dlq list`` without the app
lists none of its dead letters. So the first process to migrate a database records the
apps it loads, and every later one, whatever its kind, must load the same set: one that
loads another is refused at start, before it does anything, with the difference named.
The set changes only on purpose, with ``sluice migrate --change-apps`` (or ``sluice up
--change-apps``), which migrates the new set's tables and records it
(docs/guides/write-an-app.md, "Add or remove an app").

Checked in the migration's transaction, which the caller makes exclusive, so processes
starting together agree on one record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from sluice.errors import SluiceError
from sluice.events import utcnow

if TYPE_CHECKING:
    from sluice.store.base import Tx

log = structlog.get_logger(__name__)

GUIDE = 'docs/guides/write-an-app.md, "Add or remove an app"'


class AppSetDiffers(SluiceError):
    """This process loads other apps than the deployment it joins runs."""


async def keep_app_set(tx: Tx, apps: Sequence[str], *, change: bool = False) -> None:
    """Record ``apps`` as the deployment's on a database without a record; with one,
    refuse another set unless ``change``, which records the new set instead. Run by
    ``apply_migrations`` in its transaction, which makes the table."""
    recorded = {str(row[0]) for row in await tx.fetchall("SELECT name FROM deployment_apps")}
    loaded = set(apps)
    if recorded == loaded:
        return
    if recorded and not change:
        raise AppSetDiffers(difference(loaded, recorded))
    await tx.execute("DELETE FROM deployment_apps")
    now = utcnow().isoformat()
    for name in sorted(loaded):
        await tx.execute("INSERT INTO deployment_apps VALUES (?, ?)", (name, now))
    if recorded:
        log.warning(
            "the deployment's apps changed",
            added=sorted(loaded - recorded),
            removed=sorted(recorded - loaded),
            apps=sorted(loaded),
        )


def difference(loaded: set[str], recorded: set[str]) -> str:
    """Why a process loading ``loaded`` may not join a deployment of ``recorded``."""
    parts = []
    if missing := sorted(recorded - loaded):
        parts.append(f"it does not load {', '.join(missing)}")
    if extra := sorted(loaded - recorded):
        parts.append(f"it loads {', '.join(extra)}, which the deployment does not run")
    return (
        f"this process's apps (SLUICE_APPS) are not the deployment's: {'; and '.join(parts)}."
        f" The deployment runs {', '.join(sorted(recorded))}; this process loads"
        f" {', '.join(sorted(loaded)) or 'none'}. Start it with the deployment's apps, or"
        f" change the deployment's apps on purpose with `sluice migrate --change-apps`"
        f" ({GUIDE})"
    )
