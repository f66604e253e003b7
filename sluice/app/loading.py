"""Which apps a process runs, checked against each other and turned into one ``Apps``.

``SLUICE_APPS`` names them, comma-separated; unset, it is ``default``: every app
built into sluice (``sluice.builtin``) and every app installed in the environment
under the ``sluice.apps`` entry-point group. An entry is ``default``, the name of a
built-in or installed app, or an import path (``package.module``, whose ``app``
attribute is the app, or ``package.module:attribute``); a name that is neither
built-in nor installed is imported. An app's ``requires`` are
loaded before it, named or not.

Loading imports the apps' modules and nothing else: no connection is opened and
nothing is registered, so loading the same names twice gives equal answers. Everything
that two apps could both claim is checked, and a clash is refused with a message naming
both: app names, event types (shared by every app of a deployment, as the history
stores them by name), group, projection, task and job names, and routes. The process's
assembly (``sluice.app.assembly``) loads once, registers the event types and hands the
parts down; the engine never asks for them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sluice.app.checks import check_handled_types, check_tables, route_words, step_owners
from sluice.app.declare import App, FastPath, SchedulerService
from sluice.app.jobs import Job
from sluice.app.running import (
    engine_projection,
    group_aggregates,
    group_spec,
    projection_migrations,
)
from sluice.config import Config
from sluice.errors import ConfigError
from sluice.events import CORE_EVENTS, REGISTRY, Event
from sluice.events.registry import RegistryError
from sluice.flow.spec import Flow
from sluice.http.openapi import ROUTES
from sluice.http.route_docs import Route
from sluice.process.resources import Resources
from sluice.projections.base import EngineProjection
from sluice.projections.runtime import projection_group
from sluice.scheduler.builtin import BUILTIN as CORE_TASKS
from sluice.scheduler.builtin import Purge
from sluice.scheduler.task_spec import Task
from sluice.store.migrate import Migration, Schema
from sluice.store.migrations import MIGRATIONS as CORE_MIGRATIONS
from sluice.streams.spec import GroupSpec

log = structlog.get_logger(__name__)

_SLUICE = str(Path(__file__).parents[1]) + os.sep  # sluice's own source files
ENTRY_POINTS = "sluice.apps"
DEFAULT = "default"
# The apps built into sluice, by name: their packages under sluice.builtin.
BUILTIN: dict[str, str] = {
    name: f"sluice.builtin.{name}"
    for name in ("accounts", "links", "reminders", "articles", "operations")
}

GroupFactory = Callable[[Resources], GroupSpec]


@dataclass(frozen=True)
class Apps:
    """The apps a process runs, in load order, and what they declare, ready to run."""

    apps: tuple[App, ...]
    groups: Mapping[str, GroupFactory]  # every group of these apps, projections included
    # Every group's aggregates (those it reads), known without building it: the relay's.
    aggregates: Mapping[str, tuple[str, ...]]
    projections: Mapping[str, EngineProjection]
    routes: tuple[Route, ...]  # the apps' routes (the core's are in sluice.http.openapi)
    migrations: tuple[Migration, ...]
    jobs: Mapping[str, Job[Any]]
    sources: Mapping[str, str]  # app name -> where it came from (for messages)
    # The first segment of every route outside /v1/ (lower-cased), which no short link's
    # alias may take, and the route that takes it (docs/guides/write-an-app.md).
    reserved_words: Mapping[str, str] = field(default_factory=dict)
    # The groups declared with flow control, and their flow as declared (the deployment's
    # overrides are applied where it runs: ``sluice.flow.view.group_flows``).
    flows: Mapping[str, Flow] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [app.name for app in self.apps]

    @property
    def schema(self) -> Schema:
        """What the store is opened with: these apps' migrations and names."""
        return Schema(self.migrations, tuple(self.names()))

    @property
    def event_types(self) -> tuple[type[Event], ...]:
        """sluice's own event types and those of these apps."""
        return (*CORE_EVENTS, *(cls for app in self.apps for cls in app.events))

    @property
    def fast_path(self) -> FastPath | None:
        """What answers ``GET /{segment}`` first (an app's ``fast_path``), if any."""
        return next((factory for app in self.apps for factory in app.fast_paths), None)

    @property
    def purges(self) -> tuple[Purge, ...]:
        return tuple(purge for app in self.apps for purge in app.purges)

    @property
    def scheduler_services(self) -> tuple[SchedulerService, ...]:
        return tuple(service for app in self.apps for service in app.scheduler_services)

    def tasks(self, config: Config) -> list[Task]:
        """The apps' cron tasks, each with its declared policy (the deployment's
        ``SLUICE_<TASK>_*`` settings are laid over it by the task registry)."""
        return [
            d.task(config, f"task {d.name!r} of app {app.name!r}")
            for app in self.apps
            for d in app.tasks.values()
        ]


def load_apps(config: Config) -> Apps:
    """The apps ``config`` names (``SLUICE_APPS``), checked against sluice and each other.
    Registers nothing: ``register_events`` does, at the process's assembly."""
    return load_named(config.apps)


def load_named(names: str) -> Apps:
    """The apps ``names`` names, as ``SLUICE_APPS`` does (empty: ``default``)."""
    found = _resolve(names)
    apps = _ordered(found)
    sources = {app.name: source for app, source in found.values()}
    _check_events(apps)
    check_handled_types(apps, CORE_EVENTS)
    return _assemble(apps, sources)


def register_events(apps: Apps) -> None:
    """Register the event types of ``apps`` (with their aggregates and upcasters), so the
    process decodes them; registering the same app's types again is harmless."""
    for app in apps.apps:
        REGISTRY.register(app.name, app.events, app.aggregates, app.upcasters)


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINTS)}


def _failed(source: str, exc: BaseException) -> ConfigError:
    """What an app that raised as it was imported gets: its error and where it was raised
    (the app's own line, not the loader's)."""
    if isinstance(exc, ConfigError):
        return ConfigError(f"{source}: {exc}")
    frames = traceback.extract_tb(exc.__traceback__)
    # The innermost frame of the app's own code: not sluice's (a decorator's check), nor
    # generated code or the import machinery's (``<string>``, ``<frozen ...>``).
    own = [f for f in frames if not f.filename.startswith((_SLUICE, "<"))] or frames
    where = f" (at {own[-1].filename}:{own[-1].lineno})" if own else ""
    return ConfigError(f"{source} failed to load: {type(exc).__name__}: {exc}{where}")


def _as_app(value: Any, source: str) -> App:
    if not isinstance(value, App):
        value = getattr(value, "app", value)
    if not isinstance(value, App):
        raise ConfigError(f"{source} is not a sluice.app.App (nor a module with one named 'app')")
    return value


def _import(path: str) -> App:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
        value = getattr(module, attribute) if attribute else module
    except (ModuleNotFoundError, AttributeError) as exc:
        if isinstance(exc, ModuleNotFoundError) and not _missing(exc, module_name):
            raise _failed(f"SLUICE_APPS entry {path!r}", exc) from exc
        raise ConfigError(
            f"SLUICE_APPS entry {path!r} is no built-in or installed app's name and cannot be"
            f" imported: {exc}"
        ) from exc
    except Exception as exc:  # the app's own module raised: its mistake, named
        raise _failed(f"SLUICE_APPS entry {path!r}", exc) from exc
    return _as_app(value, f"SLUICE_APPS entry {path!r}")


def _by_name(name: str, installed: Mapping[str, importlib.metadata.EntryPoint]) -> tuple[App, str]:
    if name in BUILTIN:
        return _import(BUILTIN[name]), f"built-in {BUILTIN[name]}"
    entry = installed.get(name)
    if entry is None:
        raise ConfigError(
            f"no app named {name!r}: not built in ({', '.join(sorted(BUILTIN))}), not installed"
            f" under the {ENTRY_POINTS!r} entry points ({', '.join(sorted(installed)) or 'none'})"
        )
    source = f"entry point {name} = {entry.value} ({entry.dist.name if entry.dist else '?'})"
    try:
        return _as_app(entry.load(), source), source
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{source} cannot be loaded: {exc}") from exc
    except Exception as exc:  # the app's own module raised: its mistake, named
        raise _failed(source, exc) from exc


def _missing(exc: ModuleNotFoundError, module: str) -> bool:
    """Whether ``exc`` says ``module`` itself (or a package of its path) is not there,
    rather than a module the app imports."""
    return exc.name is not None and (module == exc.name or module.startswith(exc.name + "."))


def _resolve(names: str) -> dict[str, tuple[App, str]]:
    """Every app named (and every app they require), by name, with its source."""
    installed = _entry_points()
    wanted = [part.strip() for part in (names or DEFAULT).split(",") if part.strip()]
    found: dict[str, tuple[App, str]] = {}

    def add(app: App, source: str) -> None:
        seen = found.get(app.name)
        if seen is not None and seen[0] is not app:
            raise ConfigError(f"two apps are named {app.name!r}: {seen[1]} and {source}")
        found[app.name] = (app, source)

    for entry in wanted:
        if entry == DEFAULT:
            for name in [*BUILTIN, *sorted(installed)]:
                add(*_by_name(name, installed))
        elif "." in entry or ":" in entry or not (entry in BUILTIN or entry in installed):
            add(_import(entry), f"SLUICE_APPS entry {entry}")
        else:
            add(*_by_name(entry, installed))
    missing = _missing_requirements(found)
    while missing:
        for name in missing:
            app, source = _by_name(name, installed)
            log.info("app loaded as a requirement", app=name, source=source)
            add(app, f"{source} (required)")
        missing = _missing_requirements(found)
    return found


def _missing_requirements(found: Mapping[str, tuple[App, str]]) -> list[str]:
    return sorted({r for app, _ in found.values() for r in app.requires if r not in found})


def _ordered(found: Mapping[str, tuple[App, str]]) -> tuple[App, ...]:
    """The apps, each after the apps it requires (a cycle is refused)."""
    ordered: list[App] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        app = found[name][0]
        if app in ordered:
            return
        if name in visiting:
            raise ConfigError(f"apps require each other: {' -> '.join([*visiting, name])}")
        visiting.append(name)
        for required in app.requires:
            visit(required)
        visiting.pop()
        ordered.append(app)

    for name in found:
        visit(name)
    return tuple(ordered)


def _check_events(apps: Iterable[App]) -> None:
    """Every app's events against sluice's and each other's, before any is registered."""
    taken: dict[str, str] = {}
    known: dict[str, str] = {}
    for app in apps:
        try:
            REGISTRY.check(
                app.name, app.events, app.aggregates, app.upcasters, taken=taken, known=known
            )
        except RegistryError as exc:
            raise ConfigError(str(exc)) from None
        taken.update(dict.fromkeys((cls.__name__ for cls in app.events), app.name))
        known.update(app.aggregates)


def _unique(kind: str, owners: Iterable[tuple[str, str]], core: Iterable[str] = ()) -> None:
    """Refuse a ``kind`` name claimed twice: ``owners`` gives (name, app) pairs."""
    seen = dict.fromkeys(core, "sluice")
    for name, owner in owners:
        if name in seen:
            raise ConfigError(f"{kind} {name!r} is declared by {seen[name]} and by {owner}")
        seen[name] = owner


def _assemble(apps: tuple[App, ...], sources: Mapping[str, str]) -> Apps:
    group_names = [(g, a.name) for a in apps for g in a.groups]
    projection_names = [(p, a.name) for a in apps for p in a.projections]
    _unique("group", [*group_names, *projection_names])
    _unique("projection", projection_names)
    _unique("task", [(t, a.name) for a in apps for t in a.tasks], list(CORE_TASKS))
    _unique("job", [(j, a.name) for a in apps for j in a.jobs])
    _unique(
        "route",
        [(f"{r.method} {r.path}", a.name) for a in apps for r in a.routes],
        [f"{r.method} {r.path}" for r in ROUTES],
    )
    claimants = [a.name for a in apps for _ in a.fast_paths]
    if len(claimants) > 1:
        raise ConfigError(
            f"the fast path of GET /{{segment}} is declared by {' and by '.join(claimants)};"
            " one app of a deployment may declare it"
        )
    words = route_words(apps, ROUTES)
    loaded = {app.name for app in apps}
    groups: dict[str, GroupFactory] = {}
    aggregates: dict[str, tuple[str, ...]] = {}
    projections: dict[str, EngineProjection] = {}
    flows: dict[str, Flow] = {}
    migrations: list[Migration] = []
    for app in apps:
        migrations += sorted(app.migrations, key=lambda m: m.version)
        for name, declared in app.groups.items():
            group = declared.loaded_part(loaded)
            groups[name] = functools.partial(group_spec, group)
            aggregates[name] = group_aggregates(group)
            if group.run.flow is not None:
                flows[name] = group.run.flow
        for name, projection in app.projections.items():
            engine = projections[name] = engine_projection(projection)
            migrations += projection_migrations(projection)
            groups[name], aggregates[name] = _projection_group(engine), engine.aggregates
    check_tables(CORE_MIGRATIONS, migrations, step_owners(apps))
    return Apps(
        apps=apps,
        groups=groups,
        aggregates=aggregates,
        projections=projections,
        routes=tuple(route for app in apps for route in app.routes),
        migrations=tuple(migrations),
        jobs={name: job for app in apps for name, job in app.jobs.items()},
        sources=sources,
        reserved_words=words,
        flows=flows,
    )


def _projection_group(projection: EngineProjection) -> GroupFactory:
    return lambda resources: projection_group(projection, resources)


__all__ = ["Apps", "group_aggregates", "load_apps", "load_named", "register_events"]
