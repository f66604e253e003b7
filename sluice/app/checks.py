"""What an app gets wrong, refused where it is made (docs/guides/write-an-app.md, "What is
checked, and when").

At declaration, each decorator checks the shape of the function it is given: a handler,
a job, a task, a projection's function or a view is an ``async def`` that takes the
arguments sluice passes (an upcaster a plain ``def``), so a mistake fails as the app's
module is imported, naming the app and the function, not at the first event. At load
(``sluice.app.loading``), with every app of the process known, the checks that need them
all: every event type a group or projection handles is declared by a loaded app, no
table is created by two owners (sluice and an app, or two apps), and no route outside
``/v1/`` takes a short link's path.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from aiohttp import web

from sluice.errors import ConfigError
from sluice.events import Event
from sluice.http.route_docs import Route
from sluice.store.migrate import CORE, Migration

if TYPE_CHECKING:
    from sluice.app.declare import App


def _name(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module else name


def _is_async(function: object) -> bool:
    # Or an object whose class's __call__ is an async def (a handler with state).
    return inspect.iscoroutinefunction(function) or (
        callable(function) and inspect.iscoroutinefunction(type(function).__call__)
    )


def check_shape(
    app: str, what: str, function: object, arguments: Sequence[str], *, coroutine: bool = True
) -> None:
    """Refuse ``function`` unless it is an ``async def`` (a plain ``def`` when
    ``coroutine`` is false) that takes ``arguments`` positionally, naming ``app``, ``what``
    the function is for and the function."""
    shape = f"{'async ' if coroutine else ''}def {getattr(function, '__name__', 'f')}" + (
        f"({', '.join(arguments)})"
    )
    where = f"app {app!r}: {what}: {_name(function)} must be `{shape}`"
    if not callable(function):
        raise TypeError(f"{where}; it is not a function ({function!r})")
    if coroutine and not _is_async(function):
        raise TypeError(f"{where}; it is a plain def (sluice awaits what it returns)")
    if not coroutine and _is_async(function):
        raise TypeError(f"{where}; it is an async def (sluice calls it without awaiting)")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trusted
        return
    try:
        signature.bind(*arguments)
    except TypeError:
        raise TypeError(f"{where}; it takes {signature}") from None


def check_view(app: str, method: str, path: str, view: object) -> None:
    """A route's view: ``async def view(request)`` or a ``web.View`` subclass."""
    if isinstance(view, type) and issubclass(view, web.View):
        return
    check_shape(app, f"route {method} {path}", view, ("request",))


def check_context(app: str, context: object) -> None:
    """An ``api_context``: an async generator of one argument, the aiohttp application."""
    if not inspect.isasyncgenfunction(context):
        raise TypeError(
            f"app {app!r}: api_context {_name(context)} must be an `async def`"
            " that yields once (an aiohttp cleanup_ctx)"
        )
    check_shape(app, "api_context", context, ("app",), coroutine=False)


# What sluice passes each kind of function, by the names the guide gives them: what is
# handled first, then the transaction (or what else it writes with), then the context.
SHAPES: dict[str, tuple[str, ...]] = {
    "on": ("event", "ctx"),
    "once": ("event", "tx", "ctx"),
    "batch": ("events", "ctx"),
    "job": ("payload", "tx", "ctx"),
    "task": ("ctx",),
    "apply": ("events", "tx", "ctx"),
    "apply_payloads": ("payloads", "tx", "ctx"),
    "publish": ("events", "resources"),
    "republish": ("resources",),
    "on_dead_letter": ("message", "error"),
    "on_dead_letter_ctx": ("message", "error", "ctx"),
    "purge": ("store", "now"),
}

# Release 3's order of a projection's functions, which took what they write in first: a
# function whose first parameter has that name or annotation is still taken, swapped.
RELEASE_3_FIRST: dict[str, tuple[str, str]] = {
    "apply": ("tx", "Tx"),
    "apply_payloads": ("tx", "Tx"),
    "publish": ("resources", "Resources"),
}


def check_projection_shape(app: str, what: str, function: object, kind: str) -> bool:
    """``check_shape`` for a projection's ``kind`` of function; True when it takes its
    arguments in release 3's order (still taken, with a ``DeprecationWarning`` naming
    ``app``, ``what`` and the function): the caller swaps the first two."""
    check_shape(app, what, function, SHAPES[kind])  # positional: either order binds
    if not _in_release_3_order(kind, function):
        return False
    first, second, *rest = SHAPES[kind]
    old, new = ", ".join((second, first, *rest)), ", ".join(SHAPES[kind])
    warnings.warn(
        f"app {app!r}: {what}: {_name(function)} takes ({old}), release 3's order, which"
        f" sluice still swaps: declare it `async def"
        f" {getattr(function, '__name__', 'f')}({new})` (docs/guides/upgrades.md)",
        DeprecationWarning,
        stacklevel=4,  # the decorator's line in the app
    )
    return True


def _in_release_3_order(kind: str, function: object) -> bool:
    first = RELEASE_3_FIRST.get(kind)
    if first is None or not callable(function):
        return False
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters:
        return False
    name, annotation = first
    given = parameters[0].annotation
    spelled = given if isinstance(given, str) else getattr(given, "__name__", "")
    return parameters[0].name == name or spelled.rpartition(".")[2] == annotation


# At load -------------------------------------------------------------------------------


def check_handled_types(apps: Iterable[App], core: Iterable[type[Event]]) -> None:
    """Every event type a group or a projection of ``apps`` handles is declared by one of
    them (or is sluice's own): an undeclared type could never be appended nor read. A
    handler another app joined is that app's: it is left out where that app is not."""
    apps = tuple(apps)
    declared = {*core, *(cls for app in apps for cls in app.events)}
    names = {app.name for app in apps}
    for app in apps:
        groups = [g.loaded_part(names) for g in app.groups.values()]
        handled = [(f"group {g.name!r}", t) for g in groups for t in g.event_types]
        handled += [
            (f"projection {p.name!r}", t) for p in app.projections.values() for t in p.events
        ]
        for what, cls in handled:
            if cls not in declared:
                raise ConfigError(
                    f"app {app.name!r}: {what} handles {cls.__name__} ({cls.__module__}), which"
                    " no loaded app declares: declare it with @app.event in the app that owns"
                    " it, and load that app (SLUICE_APPS or the app's requires=)"
                )


_CREATE = re.compile(
    r"\bCREATE\s+(?:TEMP(?:ORARY)?\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?[\"`\[]?(\w+)",
    re.IGNORECASE,
)
_RENAME = re.compile(r"\bALTER\s+TABLE\s+[\"`\[]?\w+[\"`\]]?\s+RENAME\s+TO\s+[\"`\[]?(\w+)", re.I)
# The migration engine's own records (sluice.store.migrate), made outside any step.
BOOKKEEPING = ("schema_migrations", "schema_migrations_moved", "app_migrations")


def created_tables(sql: str) -> set[str]:
    """The tables ``sql`` creates (or renames a table to), lower-cased."""
    return {name.lower() for name in (*_CREATE.findall(sql), *_RENAME.findall(sql))}


def check_tables(
    core: Iterable[tuple[int, str, str]],
    steps: Iterable[Migration],
    owners: Mapping[str, str],
) -> None:
    """Refuse a table created by two owners, naming both: sluice (``core``, its
    migrations) and the apps (``steps``; ``owners`` maps a step's owner, such as
    ``projection:<name>``, to its app). A step that ``replaces`` sluice's versions owns
    tables that moved out of sluice: the core's steps no longer make them."""
    taken: dict[str, str] = dict.fromkeys(BOOKKEEPING, "sluice's migration records")
    for version, _, script in core:
        for table in created_tables(script):
            taken.setdefault(table, f"sluice (its migration {version})")
    mine: dict[str, str] = {}
    for step in steps:
        app = owners.get(step.owner, step.owner)
        for table in created_tables(step.sql):
            other = taken.get(table)
            if other is not None and mine.get(table) != app:
                raise ConfigError(
                    f"table {table!r}: app {app!r} creates it (migration {step.version}"
                    f" {step.name!r} of {step.owner}), and {other} does too; an app's tables"
                    f" are its own: rename it (tables are best named after the app,"
                    f" {app.replace('-', '_')}_...)"
                )
            taken[table], mine[table] = (
                f"app {app!r} (migration {step.version} of {step.owner})",
                app,
            )


def step_owners(apps: Iterable[App]) -> dict[str, str]:
    """Each migration owner (an app, or ``projection:<name>``) and the app it belongs to."""
    owners: dict[str, str] = {CORE: CORE}
    for app in apps:
        owners[app.name] = app.name
        for name in app.projections:
            owners[f"projection:{name}"] = app.name
    return owners


def route_words(apps: Iterable[App], core: Iterable[Route]) -> dict[str, str]:
    """The first path segment of every route outside ``/v1/`` (sluice's and the apps'),
    lower-cased, with the route that takes it: a short link's alias never equals one
    (the links app refuses it, as it refuses ``admin``), so no route shadows a link.

    A route whose first segment is a variable (``/{name}``) would take every short link's
    path: only the app that answers ``GET /{segment}`` (its ``fast_path``: the short links
    themselves) may declare one; any other app's is refused here, naming it."""
    words: dict[str, str] = {}
    routes = [("sluice", route) for route in core]
    routes += [(app.name, route) for app in apps for route in app.routes]
    owners = {app.name for app in apps if app.fast_paths}
    for owner, route in routes:
        segment = route.path.split("/")[1] if route.path.startswith("/") else ""
        if segment.lower() in ("", "v1"):
            continue
        if "{" in segment:
            if owner not in owners:
                raise ConfigError(
                    f"app {owner!r}: route {route.method} {route.path} would answer every"
                    " short link's path: serve it under /v1/ (or a fixed first segment)"
                )
            continue
        words.setdefault(segment.lower(), f"route {route.method} {route.path} of {owner}")
    return words
