"""An app's own settings: a ``Settings`` struct the app declares, read from ``SLUICE_*``.

Each field of an app's ``Settings`` subclass is the variable ``SLUICE_<FIELD>`` (the
field's name upper-cased), as ``Config``'s are: the type says how its text is read
(``int``, ``float``, ``str``, ``str | None``), ``Annotated[int, Meta(ge=1)]`` bounds
it, a ``__post_init__`` raising ``ValueError`` checks the rest. The app names the
class (``App("links", settings=LinksSettings)``); loading the app reads it, and a value
the app cannot use stops the process with a message naming the variable and the app.
Its functions reach the values with ``LinksSettings.of(ctx)`` (a handler's, job's,
task's or projection's context, the request of a view, the resources or the config).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol, Self, get_args, get_origin

import msgspec
from aiohttp import web

from sluice.config import Config
from sluice.errors import ConfigError
from sluice.flow.spec import FLOW_SUFFIXES
from sluice.http.app_keys import CONFIG

if TYPE_CHECKING:
    from sluice.app.declare import App


class _HasConfig(Protocol):
    @property
    def config(self) -> Config: ...


class _HasResources(Protocol):
    @property
    def resources(self) -> _HasConfig: ...


Source = Config | web.Request | web.Application | _HasConfig | _HasResources


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """The base of an app's settings (``App(name, settings=MySettings)``): each field is
    read from ``SLUICE_<FIELD>``, with the field's default when that is unset or empty."""

    @classmethod
    def of(cls, source: Source) -> Self:
        """These settings as the deployment of ``source`` set them: a context (handler,
        job, task, projection), a request or the API's ``web.Application``, the
        ``Resources`` or the ``Config``."""
        config = config_of(source)
        cache = config.app_values.parsed
        found = cache.get(cls)
        if found is None:
            found = cache[cls] = read(cls, config.app_values.values)
        return found  # type: ignore[return-value]


def config_of(source: Source) -> Config:
    """The config of ``source`` (what ``Settings.of`` takes)."""
    if isinstance(source, Config):
        return source
    if isinstance(source, web.Request):
        return source.app[CONFIG]
    if isinstance(source, web.Application):
        return source[CONFIG]
    if hasattr(source, "resources"):
        return source.resources.config
    return source.config


def variable(name: str) -> str:
    """The environment variable of the setting ``name``."""
    return f"SLUICE_{name.upper()}"


def read(cls: type[Settings], values: Mapping[str, object], app: str = "") -> Settings:
    """``cls`` from the ``SLUICE_*`` values (by lower-case name); a value it refuses is a
    ``ConfigError`` naming the variable (and ``app``)."""
    given = {name: values[name] for name in cls.__struct_fields__ if name in values}
    try:
        return msgspec.convert(given, cls, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_message(cls, given, exc, app)) from None


_AT = re.compile(r" - at `\$\.(\w+)`$")


def _message(cls: type[Settings], given: Mapping[str, object], exc: Exception, app: str) -> str:
    owner = f" (a setting of app {app!r})" if app else ""
    text = str(exc)
    at = _AT.search(text)
    if at is None:  # the struct's own __post_init__ refused the values together
        return f"{text}{owner}"
    name = at[1]
    field = next(f for f in msgspec.structs.fields(cls) if f.name == name)
    return f"{variable(name)} {_expected(field.type)}, got {given.get(name)!r}{owner}"


def _expected(annotation: Any) -> str:
    base, bounds = annotation, msgspec.Meta()
    if get_origin(annotation) is Annotated:
        base, *metas = get_args(annotation)
        bounds = next((m for m in metas if isinstance(m, msgspec.Meta)), bounds)
    kind = {int: "an integer", float: "a number"}.get(base, "text")
    if bounds.ge is not None:
        return f"must be {kind} of at least {bounds.ge}"
    if bounds.gt is not None:
        return f"must be {kind} more than {bounds.gt}"
    return f"must be {kind}"


def declared(apps: Iterable[App]) -> dict[str, tuple[App, msgspec.structs.FieldInfo]]:
    """Every app setting of ``apps`` by name, with its app; two apps declaring one name,
    or an app declaring one of ``Config``'s, is refused naming both."""
    found: dict[str, tuple[App, msgspec.structs.FieldInfo]] = {}
    core = set(Config.__struct_fields__)
    for app in apps:
        if app.settings is None:
            continue
        for field in msgspec.structs.fields(app.settings):
            if field.name in core:
                raise ConfigError(
                    f"app {app.name!r} declares the setting {variable(field.name)}, one of sluice's"
                )
            other = found.get(field.name)
            if other is not None:
                raise ConfigError(
                    f"apps {other[0].name!r} and {app.name!r} both declare the setting"
                    f" {variable(field.name)}"
                )
            found[field.name] = (app, field)
    return found


def read_settings(apps: Iterable[App], config: Config) -> None:
    """Read every app's settings from ``config`` (the process's loaded apps, at start):
    a value an app cannot use stops the process here, naming the variable and the app.
    A flow group's limits (``SLUICE_<GROUP>_KEY_RATE``...) are settings of the group."""
    apps = list(apps)
    flows = {
        f"{group.name.replace('-', '_')}_{suffix}"
        for app in apps
        for group in app.groups.values()
        if group.run.flow is not None
        for suffix in FLOW_SUFFIXES
    }
    unknown = sorted(config.app_values.given - declared(apps).keys() - flows)
    if unknown:
        raise ConfigError(
            f"no setting of sluice or of the apps loaded ({', '.join(a.name for a in apps)})"
            f" is named {', '.join(unknown)}"
        )
    for app in apps:
        if app.settings is not None and app.settings not in config.app_values.parsed:
            config.app_values.parsed[app.settings] = read(
                app.settings, config.app_values.values, app.name
            )
