"""docs/reference/configuration.md: every setting, from the Config struct and .env.example.

The struct says which settings exist, their types and their defaults; .env.example, which
a user copies, says what each means, once (its header says how it is read). Each is
checked against the other: a field .env.example does not describe, a variable that is no
field, a default written differently in the two, a variable without a comment: generation
stops naming every one, so neither can drift from the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import msgspec

from tools.reference.markdown import code, generated, page, prose, table
from tools.reference.undocumented import Undocumented

PAGE = "configuration.md"
_SECTION = re.compile(r"# --- (?P<title>.+) ---")
_VARIABLE = re.compile(r"(?P<unset># )?(?P<name>SLUICE_[A-Z0-9_<>]+)=(?P<value>.*)")
_PLACEHOLDER = re.compile(r"<[A-Z]+>_")
PROBE = "REFERENCE_PROBE"


@dataclass(frozen=True)
class Variable:
    """One ``SLUICE_*`` line of .env.example."""

    name: str
    value: str  # as written, quotes removed: the default when set, an example when not
    unset: bool  # the line is commented out: unset by default
    meaning: str
    section: str


def parse(text: str) -> list[Variable]:
    """The variables of .env.example, each with the comment above it (variables on the
    lines right after another share its comment). The header, up to the first section,
    describes the file and no variable."""
    variables: list[Variable] = []
    section: str | None = None
    comment: list[str] = []
    after_variable = False
    for line in text.splitlines():
        heading, variable = _SECTION.fullmatch(line), _VARIABLE.fullmatch(line)
        if heading is not None:
            section, comment, after_variable = heading["title"], [], False
        elif variable is not None and section is not None:
            shared = variables[-1].meaning if after_variable and not comment else ""
            value = variable["value"]
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            meaning = " ".join(comment) or shared
            unset = variable["unset"] is not None
            variables.append(Variable(variable["name"], value, unset, meaning, section))
            comment, after_variable = [], True
        elif line.startswith("#") and section is not None:
            if after_variable:
                comment, after_variable = [], False
            comment.append(line.lstrip("#").strip())
        else:
            comment, after_variable = [], False
    return variables


def _kind(annotation: Any) -> str:
    """How a reader thinks of a setting's type."""
    if get_origin(annotation) is Annotated:
        return _kind(get_args(annotation)[0])
    if get_origin(annotation) is dict:
        return _kind(get_args(annotation)[1])
    names = {int: "integer", float: "number", str: "string", Path: "path"}
    choices = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    return " or ".join(names.get(choice, getattr(choice, "__name__", "?")) for choice in choices)


def _as_written(annotation: Any, raw: str) -> object:
    """``raw`` read as the struct's field of that type would be."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    converters: dict[Any, Callable[[str], object]] = {int: int, float: float, Path: Path}
    return converters.get(annotation, str)(raw)


@dataclass(frozen=True)
class Setting:
    variable: Variable
    kind: str
    app: str = ""  # the app that declares it; "": sluice's own


# Config's field that holds the apps' settings (each described as its app's).
_APP_VALUES = "app_values"


def _fields(
    config: type[msgspec.Struct], app_settings: Sequence[tuple[str, type[msgspec.Struct]]]
) -> tuple[dict[str, msgspec.structs.FieldInfo], dict[str, str]]:
    """Every setting's field by its variable, sluice's and the apps'; and the app of
    each app's setting."""
    fields = {
        f"SLUICE_{f.name.upper()}": f
        for f in msgspec.structs.fields(config)
        if f.name != _APP_VALUES
    }
    owners: dict[str, str] = {}
    for app, struct in app_settings:
        for f in msgspec.structs.fields(struct):
            fields[f"SLUICE_{f.name.upper()}"] = f
            owners[f"SLUICE_{f.name.upper()}"] = app
    return fields, owners


def _settings(
    config: type[msgspec.Struct],
    variables: list[Variable],
    load: Callable[[Mapping[str, str]], object],
    read_elsewhere: Callable[[str], bool],
    app_settings: Sequence[tuple[str, type[msgspec.Struct]]] = (),
) -> Iterator[Setting | str]:
    """Each variable with its type, or a problem (a string) where the two sources part."""
    fields, owners = _fields(config, app_settings)
    by_name = {f.name: f for f in fields.values()}
    described: set[str] = set()
    for variable in variables:
        if not variable.meaning:
            yield f"{variable.name} has no comment saying what it means"
        field = fields.get(variable.name)
        if _PLACEHOLDER.search(variable.name):
            field = by_name.get(_probed(variable, load) or "")
            if field is None:
                yield f"{variable.name}: no setting of the config reads it (as {variable.value!r})"
                continue
        elif field is None:
            if read_elsewhere(variable.name):  # by a module, straight from the environment
                yield Setting(variable, "string")
            else:
                yield f"{variable.name} is in .env.example, but no setting or module reads it"
            continue
        elif not variable.unset and _as_written(field.type, variable.value) != field.default:
            yield (
                f"{variable.name}: .env.example sets {variable.value!r}, but the config's"
                f" default is {field.default!r}"
            )
        described.add(field.name)
        yield Setting(variable, _kind(field.type), owners.get(variable.name, ""))
    for name, field in fields.items():
        if field.name not in described:
            owner = f"app {owners[name]!r}" if name in owners else "the config"
            yield f"{name} is a setting of {owner} that .env.example does not describe"


def _probed(variable: Variable, load: Callable[[Mapping[str, str]], object]) -> str | None:
    """The config field a ``SLUICE_<NAME>_SUFFIX`` variable lands in: the config is
    loaded with one such variable, named for the probe, and the field holding it found."""
    name = _PLACEHOLDER.sub(f"{PROBE}_", variable.name)
    try:
        loaded = load({name: variable.value})
    except Exception:  # the example is not a value the config takes
        return None
    key = PROBE.lower().replace("_", "-")
    for field in msgspec.structs.fields(type(loaded)):  # type: ignore[arg-type]
        held = getattr(loaded, field.name)
        if isinstance(held, dict) and key in held:
            return field.name
    return None


def _default(variable: Variable) -> str:
    if variable.unset:
        return "unset"
    return code(variable.value) if variable.value else "empty"


def anchor(name: str) -> str:
    """The id MkDocs (and GitHub) give a setting's heading: ``sluice_redis_url``."""
    return re.sub(r"[^a-z0-9_]", "", name.lower())


def _summary(settings: list[Setting]) -> str:
    rows = (
        [f"[{code(s.variable.name)}](#{anchor(s.variable.name)})", s.kind, _default(s.variable)]
        for s in settings
    )
    return table(["Variable", "Type", "Default"], rows)


def _detail(setting: Setting) -> str:
    variable = setting.variable
    facts = f"{setting.kind}, default {_default(variable)}"
    if setting.app:
        facts += f"; a setting of the {code(setting.app)} app"
    if variable.unset and variable.value:
        facts += f"; for example {code(variable.value)}"
    return f"### {code(variable.name)}\n\n{facts}\n\n{prose(variable.meaning)}"


INTRO = """\
# Configuration

Every sluice process reads these `SLUICE_*` variables from its environment once, at
start, into one typed config; a value it cannot use stops the process with a message
naming the variable. `.env.example`, at the top of the repository, lists them all with
their defaults: copy it to `.env` to start from. "unset" means the variable is absent (or
empty) unless you set it; `<GROUP>` and `<TASK>` stand for a handler group's or a
task's name, upper-cased, `-` as `_`. A setting of an app (its `Settings`, see
[Write an app](../guides/write-an-app.md)) is read when that app is loaded, and only in
a deployment that runs it."""


def render(
    config: type[msgspec.Struct],
    env_example: str,
    load: Callable[[Mapping[str, str]], object],
    read_elsewhere: Callable[[str], bool],
    app_settings: Sequence[tuple[str, type[msgspec.Struct]]] = (),
) -> str:
    """The page; raises ``Undocumented`` naming every setting the sources disagree on:
    sluice's ``config``, each app's settings struct, ``.env.example``."""
    found = list(_settings(config, parse(env_example), load, read_elsewhere, app_settings))
    problems = [item for item in found if isinstance(item, str)]
    if problems:
        raise Undocumented(PAGE, problems)
    settings = [item for item in found if isinstance(item, Setting)]
    sections: dict[str, list[Setting]] = {}
    for setting in settings:
        sections.setdefault(setting.variable.section, []).append(setting)
    blocks = [generated("sluice/config/__init__.py, the apps' settings and .env.example"), INTRO]
    for title, members in sections.items():
        blocks += [f"## {title}", _summary(members), *map(_detail, members)]
    return page(*blocks)
