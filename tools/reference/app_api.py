"""docs/reference/app-api.md: every name an app may use, as Markdown.

From the public modules themselves: ``sluice.app`` (its ``__all__``) and the testing
plugin ``sluice.app.testing`` (its ``__all__`` and its pytest fixtures): each class with
its signature, docstring and public methods (a struct with its fields), each function
with its signature and docstring, each value with the comment above its assignment where
it is defined. Then, briefly, the lower-level ``sluice.app.advanced``: one row a name,
with its docstring's first paragraph (a value's comment, a module's docstring) and the
built-in apps named by the comment above its import there. Written as Markdown like the
other reference pages, so the page reads the same in the repository as on the docs site.
A public name, method or fixture without a docstring (a value without its comment; an
advanced name without its apps) stops generation: the page cannot leave it out.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec

from tools.reference.markdown import code, generated, page, table
from tools.reference.undocumented import Undocumented

PAGE = "app-api.md"

INTRO = """\
# The app API

Everything an app may use: the names of `sluice.app` (its `__all__`), of the testing
plugin `sluice.app.testing` and, at the end, of the lower-level `sluice.app.advanced`.
What is not on this page may change between releases. The guide is
[Write your own app](../guides/write-an-app.md); the settings every `Config` holds are
in the [configuration reference](configuration.md)."""

# Structs whose fields are documented on a page of their own.
FIELDS_ELSEWHERE = {"Config": "configuration.md"}


@dataclass(frozen=True)
class Module:
    """One public module: its import name, the module, and its source (for the values'
    comments and the fixtures)."""

    name: str
    module: ModuleType
    # Given for the lower-level module, listed one row a name: the built-in apps that use
    # each name (``import_comments``).
    used_by: Mapping[str, str] | None = None


def _doc(text: str | None) -> str:
    """A docstring as Markdown: reST's double backticks as code spans, ``::`` blocks fenced."""
    if not text:
        return ""
    text = inspect.cleandoc(text)
    out: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.rstrip().endswith("::"):
            out.append(line.rstrip()[:-1].rstrip(":") + ":" if line.strip() != "::" else "")
            block: list[str] = []
            index += 1
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] == " "):
                block.append(lines[index])
                index += 1
            code_block = textwrap.dedent("\n".join(block)).strip("\n")
            out.extend(["", "```python", code_block, "```", ""])
            continue
        out.append(re.sub(r"``(.+?)``", r"`\1`", line))
        index += 1
    return "\n".join(out).strip()


class _Written:
    """An annotation as written in the source (postponed: a string), shown unquoted."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _written(annotation: Any) -> Any:
    return _Written(annotation) if isinstance(annotation, str) else annotation


def _signature(name: str, obj: Any) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    given = signature.parameters.values()
    parameters = [p.replace(annotation=_written(p.annotation)) for p in given]
    signature = signature.replace(
        parameters=parameters, return_annotation=_written(signature.return_annotation)
    )
    return f"{name}{signature}"


def _own_methods(cls: type) -> Iterator[tuple[str, Any]]:
    """The public callables and properties the class defines (not object's, not a
    struct's or protocol's machinery), in source order."""
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if callable(member) or isinstance(member, property):
            yield name, member


def _struct_fields(cls: type[msgspec.Struct]) -> str:
    hints = {name: str(hint) for name, hint in cls.__annotations__.items()}
    for base in cls.__mro__[1:]:
        for name, hint in getattr(base, "__annotations__", {}).items():
            hints.setdefault(name, str(hint))
    given = cls.__struct_defaults__
    with_default = cls.__struct_fields__[len(cls.__struct_fields__) - len(given) :]
    defaults = dict(zip(with_default, given, strict=True))
    rows = []
    for field in cls.__struct_fields__:
        default = defaults.get(field, inspect.Parameter.empty)
        shown = "required" if default is inspect.Parameter.empty else _default(default)
        rows.append([code(field), code(hints.get(field, "Any")), shown])
    return table(["field", "type", "default"], rows)


def _dataclass_fields(cls: type) -> str:
    rows = []
    for field in dataclasses.fields(cls):
        if not field.init:  # what the class keeps for itself, not what it is made of
            continue
        if field.default is not dataclasses.MISSING:
            shown = _default(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            shown = code(f"{getattr(field.default_factory, '__name__', 'factory')}()")
        else:
            shown = "required"
        rows.append([code(field.name), code(str(field.type)), shown])
    return table(["field", "type", "default"], rows)


def _default(value: Any) -> str:
    factory = getattr(value, "factory", None)  # msgspec.field(default_factory=...)
    if callable(factory):
        return code(f"{getattr(factory, '__name__', 'factory')}()")
    return code(repr(value))


def _class(name: str, cls: type, problems: list[str]) -> str:
    doc = _doc(cls.__doc__)
    if doc.startswith(f"{cls.__name__}("):  # dataclasses write one of their own
        doc = ""
    if not doc:
        problems.append(f"class {name} has no docstring")
    kind = "protocol" if getattr(cls, "_is_protocol", False) else "class"
    head = name if kind == "protocol" else _signature(name, cls)
    if name in FIELDS_ELSEWHERE:
        head = f"{name}(*, ...)"
    blocks = [f"### `{name}`", f"```python\n{kind} {head}\n```", doc]
    if dataclasses.is_dataclass(cls):
        blocks.append(_dataclass_fields(cls))
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        if name in FIELDS_ELSEWHERE:
            blocks.append(f"Its fields: the [settings]({FIELDS_ELSEWHERE[name]}).")
        elif cls.__struct_fields__:
            blocks.append(_struct_fields(cls))
    for method, member in _own_methods(cls):
        blocks.append(_member(f"{name}.{method}", member, problems))
    return page(*blocks).rstrip("\n")


def _member(qualified: str, member: Any, problems: list[str]) -> str:
    if isinstance(member, property):
        text = _doc(member.__doc__)
        shown = f"{qualified}  # property"
        if member.fget is not None and "return" in member.fget.__annotations__:
            shown = f"{qualified} -> {member.fget.__annotations__['return']}  # property"
    else:
        text = _doc(getattr(member, "__doc__", None))
        prefix = "async def " if inspect.iscoroutinefunction(member) else "def "
        shown = prefix + _signature(qualified, member).replace("(self, ", "(").replace(
            "(self)", "()"
        )
    if not text:
        problems.append(f"{qualified} has no docstring")
    return page(f"#### `{qualified}`", f"```python\n{shown}\n```", text).rstrip("\n")


def _function(name: str, function: Any, problems: list[str]) -> str:
    text = _doc(function.__doc__)
    if not text:
        problems.append(f"function {name} has no docstring")
    prefix = "async def " if inspect.iscoroutinefunction(function) else "def "
    return page(
        f"### `{name}`", f"```python\n{prefix}{_signature(name, function)}\n```", text
    ).rstrip("\n")


def _imported_from(module: ModuleType) -> dict[str, str]:
    """Where each name ``module`` imports comes from (its ``from X import name`` lines)."""
    tree = ast.parse(inspect.getsource(module))
    return {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def import_comments(module: ModuleType) -> dict[str, str]:
    """The ``#`` line right above each top-level ``from X import`` of ``module``, by the
    name each import binds: in ``sluice.app.advanced``, the built-in apps that use it."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    comments = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.lineno >= 2:
            above = lines[node.lineno - 2]
            if above.startswith("#"):
                for alias in node.names:
                    comments[alias.asname or alias.name] = above.lstrip("#").strip()
    return comments


def _first_paragraph(text: str) -> str:
    return " ".join(_doc(text).split("\n\n")[0].split())


def _kind_and_text(name: str, obj: Any, origin: str) -> tuple[str, str]:
    """What ``obj`` is, and the text that documents it (``origin``: where it is defined)."""
    if inspect.ismodule(obj):
        return "module", obj.__doc__ or ""
    if isinstance(obj, type) and not hasattr(obj, "__origin__"):
        text = obj.__doc__ or ""
        return "class", "" if text.startswith(f"{obj.__name__}(") else text  # a dataclass's
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        return "function", obj.__doc__ or ""
    return "value", _value_comment(name, origin)


def _brief(module: ModuleType, used_by: Mapping[str, str], problems: list[str]) -> str:
    """``module``'s names as one table: kind, summary, the built-in apps that use each."""
    imported = _imported_from(module)
    rows = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        kind, text = _kind_and_text(name, obj, imported.get(name, module.__name__))
        summary = _first_paragraph(text)
        if not summary:
            problems.append(f"{kind} {name} of {module.__name__} has no docstring")
        if kind == "class":  # not shown, but documented as on the rest of the page
            for method, member in _own_methods(obj):
                if not _doc(getattr(member, "__doc__", None)):
                    problems.append(f"{name}.{method} of {module.__name__} has no docstring")
        if not used_by.get(name):
            problems.append(f"{name} of {module.__name__} has no comment naming its apps")
        rows.append([code(name), kind, summary, used_by.get(name, "")])
    return table(["name", "kind", "what it is", "used by"], rows)


def _value_comment(name: str, module_name: str) -> str:
    """The ``#`` lines right above ``name``'s assignment in its module."""
    import importlib

    source = inspect.getsource(importlib.import_module(module_name)).splitlines()
    pattern = re.compile(rf"^{re.escape(name)}\s*(:[^=]+)?=")
    for number, line in enumerate(source):
        if pattern.match(line):
            comment: list[str] = []
            above = number - 1
            while above >= 0 and source[above].startswith("#"):
                comment.insert(0, source[above].lstrip("#").strip() or "\n\n")
                above -= 1
            return " ".join(comment).replace(" \n\n ", "\n\n")  # a bare ``#``: a paragraph
    return ""


def _value(name: str, module: ModuleType, value: Any, problems: list[str]) -> str:
    origin = _imported_from(module).get(name, module.__name__)
    text = _value_comment(name, origin)
    if not text:
        problems.append(f"value {name} has no comment above its assignment in {origin}")
    kind = "type alias" if isinstance(value, type) or hasattr(value, "__origin__") else "value"
    return page(f"### `{name}`", f"*{kind}*", _doc(text)).rstrip("\n")


def _entry(name: str, module: ModuleType, problems: list[str]) -> str:
    obj = getattr(module, name)
    if isinstance(obj, type) and not hasattr(obj, "__origin__"):
        return _class(name, obj, problems)
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        return _function(name, obj, problems)
    return _value(name, module, obj, problems)


def _fixtures(module: ModuleType, problems: list[str]) -> Iterator[str]:
    """The pytest fixtures the module offers (``@pytest.fixture``, defined there or
    imported into it): the plugin's API beside ``__all__``."""
    for name, obj in vars(module).items():
        if name.startswith("_") or type(obj).__name__ != "FixtureFunctionDefinition":
            continue
        function = inspect.unwrap(obj)
        text = _doc(function.__doc__)
        if not text:
            problems.append(f"fixture {name} has no docstring")
        shown = f"@pytest.fixture\ndef {_signature(name, function)}"
        yield page(f"### `{name}` (fixture)", f"```python\n{shown}\n```", text).rstrip("\n")


def render(modules: Iterable[Module]) -> str:
    """The page, from the public modules in order; ``Undocumented`` names every gap."""
    problems: list[str] = []
    blocks = [generated("sluice.app, sluice.app.testing and sluice.app.advanced"), INTRO]
    for public in modules:
        module = public.module
        names = list(getattr(module, "__all__", ()))
        blocks.append(f"## `{public.name}`")
        blocks.append(_doc(module.__doc__))
        if public.used_by is not None:
            blocks.append(_brief(module, public.used_by, problems))
            continue
        blocks.extend(_entry(name, module, problems) for name in names)
        blocks.extend(_fixtures(module, problems))
    if problems:
        raise Undocumented(PAGE, problems)
    return page(*blocks)
