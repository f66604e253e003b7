"""One process's parts, built once and handed down (docs/design/index.md, "Assembly").

A process (``sluice api``, ``worker``, ``relay``, ``scheduler``, ``up``, each command,
a test's harness) is built from its configuration and the apps it names
(``SLUICE_APPS``): ``assemble(config)`` loads them (``sluice.app.loading``, which
registers nothing), registers their event types here, and returns the ``Parts`` from
which everything else is given what it needs: the store its migrations and the app set
(``Apps.schema``), the scheduler its tasks and the apps' purges, the API its routes,
contexts and tasks, the relay the aggregates each group reads. The engine below never
asks which apps run.

The apps of a set of names are loaded once per process (tests load many deployments in
one process): the same ``Apps`` object comes back, so a test that swaps a group in
``default_apps().groups`` swaps it for every part built after.
"""

from __future__ import annotations

import functools
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from aiohttp import web

from sluice import http, store
from sluice.app.loading import Apps, load_named, register_events
from sluice.app.settings import read_settings
from sluice.config import Config
from sluice.errors import ConfigError
from sluice.process import resources
from sluice.scheduler import registry
from sluice.scheduler.task_spec import Task


@dataclass(frozen=True)
class Parts:
    """A process's configuration and apps; each method builds one engine part of it."""

    config: Config
    apps: Apps

    def tasks(self) -> dict[str, Task]:
        """Every task of the process: sluice's (its purge running the apps' purges), the
        apps' and SLUICE_EXTRA_TASKS', each with its policy."""
        return registry.all_tasks(self.config, self.apps.tasks(self.config), self.apps.purges)

    def open_resources(self) -> AbstractAsyncContextManager[resources.Resources]:
        """The store (migrated, the app set checked), Redis and keys of a worker or
        command."""
        return resources.open_resources(self.config, self.apps.schema, self.apps.reserved_words)

    async def open_store(self) -> store.Store:
        return await store.open_store(self.config, self.apps.schema)

    async def migrate_store(self, *, change_apps: bool = False) -> list[str]:
        return await store.migrate_store(self.config, self.apps.schema, change_apps=change_apps)

    def api(self) -> web.Application:
        """The API application (``sluice.http.create_app``), no I/O done."""
        return http.create_app(self.config, self.apps, self.tasks())


def assemble(config: Config) -> Parts:
    """The parts of a process running ``config``: its apps loaded (once per process for
    the same ``SLUICE_APPS``), checked, their event types registered, and their settings
    read from ``config`` (a value an app cannot use stops the process here)."""
    return Parts(config, loaded_apps(config))


@functools.cache
def _loaded(names: str) -> Apps:
    apps = load_named(names)
    register_events(apps)
    return apps


def loaded_apps(config: Config) -> Apps:
    """The apps of ``config``'s process, as ``assemble`` loads them, with their settings
    read from ``config``."""
    apps = _loaded(config.apps)
    read_settings(apps.apps, config)
    _check_snapshot_types(apps, config)
    return apps


def _check_snapshot_types(apps: Apps, config: Config) -> None:
    """``SLUICE_SNAPSHOT_EVERY`` names only aggregate types these apps (or sluice)
    declare: a misspelt one would silently leave the class's interval in force."""
    declared = {kind for app in apps.apps for kind in app.aggregates}
    declared.update(event_type.aggregate for event_type in apps.event_types)
    unknown = sorted(set(config.snapshot_intervals) - declared)
    if unknown:
        raise ConfigError(
            f"SLUICE_SNAPSHOT_EVERY names {', '.join(map(repr, unknown))}, which no loaded app"
            f" declares as an aggregate type; declared: {', '.join(sorted(declared))}"
        )


def default_apps() -> Apps:
    """The apps of a deployment that names none: every built-in and installed app."""
    return _loaded("")


def forget_loaded() -> None:
    """Load the apps again at the next ``assemble`` (tests that install apps on the fly).
    Their event types stay registered: a name is never reused for another type."""
    _loaded.cache_clear()


# The engine's entry points with the parts of ``config``'s process, in one call: what
# sluice's own tests and benches build a process from.


def create_app(config: Config) -> web.Application:
    return assemble(config).api()


def open_resources(config: Config) -> AbstractAsyncContextManager[resources.Resources]:
    return assemble(config).open_resources()


async def open_store(config: Config) -> store.Store:
    return await assemble(config).open_store()


async def migrate_store(config: Config, *, change_apps: bool = False) -> list[str]:
    return await assemble(config).migrate_store(change_apps=change_apps)


def all_tasks(config: Config) -> dict[str, Task]:
    return assemble(config).tasks()
