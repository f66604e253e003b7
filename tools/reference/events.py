"""docs/reference/events.md: every event type of the tagged union (``sluice.events``).

Read through ``msgspec.inspect``: each type's tag (its name in the history and on the
streams), aggregate and stream, its docstring, each field with its type, default and
the comment on its line; the fields every event carries (the union's common base) once,
and the shapes events nest (a link's rules). A type without a docstring stops generation.
"""

from __future__ import annotations

import inspect
import io
import tokenize
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import msgspec.inspect as mi

from tools.reference.markdown import code, generated, page, prose, table
from tools.reference.undocumented import Undocumented

PAGE = "events.md"
_SIMPLE = {
    mi.BoolType: "boolean",
    mi.IntType: "integer",
    mi.FloatType: "number",
    mi.NoneType: "null",
    mi.DateTimeType: "datetime (RFC 3339)",
    mi.DateType: "date",
}


def _bounds(low: object, high: object, unit: str) -> str:
    if low is not None and high is not None:
        return f", {low} to {high}{unit}"
    if low is not None or high is not None:
        return f", at {'least' if low is not None else 'most'} {low or high}{unit}"
    return ""


def kind(info: mi.Type) -> str:
    """A field's type in words, linking the shapes it nests."""
    if isinstance(info, mi.UnionType):
        return " or ".join(kind(one) for one in info.types)
    if isinstance(info, mi.StructType):
        return f"[{info.cls.__name__}](#{info.cls.__name__.lower()})"
    if isinstance(info, mi.LiteralType):
        return "one of " + ", ".join(code(str(value)) for value in info.values)
    if isinstance(info, mi.StrType):
        text = "string" + _bounds(info.min_length, info.max_length, " characters")
        return text + (f", matching {code(info.pattern)}" if info.pattern else "")
    if isinstance(info, mi.VarTupleType | mi.ListType):
        return f"list of {kind(info.item_type)}" + _bounds(info.min_length, info.max_length, "")
    return _SIMPLE.get(type(info), type(info).__name__)


def _default(field: mi.Field) -> str:
    if field.required:
        return "required"
    if field.default_factory is not msgspec.NODEFAULT:
        return "set when the event is made"
    return code(msgspec.json.encode(field.default).decode())


def _notes(struct: type) -> dict[str, str]:
    """The comment at the end of each field's line, in ``struct``'s class and its bases."""
    found: dict[str, str] = {}
    for cls in reversed(struct.__mro__):
        if not issubclass(cls, msgspec.Struct) or cls is msgspec.Struct:
            continue
        source = io.StringIO(inspect.getsource(cls))
        for token in tokenize.generate_tokens(source.readline):
            name, colon, _ = token.line.strip().partition(":")
            if token.type == tokenize.COMMENT and colon and name.isidentifier():
                found[name] = token.string.lstrip("#").strip()
    return found


def _fields(info: mi.StructType, skip: frozenset[str] = frozenset()) -> str:
    said = _notes(info.cls)
    rows = (
        [code(f.encode_name), kind(f.type), _default(f), prose(said.get(f.name, ""))]
        for f in info.fields
        if f.name not in skip
    )
    return table(["Field", "Type", "Default", "Note"], rows)


def _nested(info: mi.Type, seen: set[type]) -> Iterator[mi.StructType]:
    """The structs ``info`` holds, each once, depth first."""
    if isinstance(info, mi.StructType) and info.cls not in seen:
        seen.add(info.cls)
        yield info
        for field in info.fields:
            yield from _nested(field.type, seen)
    for inner in getattr(info, "types", ()) or (getattr(info, "item_type", None),):
        if inner is not None:
            yield from _nested(inner, seen)


def _doc(cls: type) -> str:
    return prose(" ".join(inspect.cleandoc(cls.__doc__ or "").split()))


def _first_sentence(cls: type) -> str:
    text = " ".join(inspect.cleandoc(cls.__doc__ or "").split())
    head, dot, _ = text.partition(". ")
    return prose(head + dot.strip())


INTRO = """\
# Events

Every change is an event, committed to the history (the outbox) in the transaction
that makes it, then published by the relay to its aggregate's Redis stream, where the
handler groups read it. An event travels as JSON: the key `type` holds its tag, the
others its fields. Fields added later have defaults, and unknown fields are ignored, so
an older consumer reads a newer event. The streams named here are those of the default
prefix with one partition; with `SLUICE_STREAM_PARTITIONS` above 1 (or on a cluster)
each partition of an aggregate type has a stream of its own."""


def render(union: Any, stream_of: Callable[[str], str]) -> str:
    """The page for the event types of ``union`` (``A | B | ...``); raises
    ``Undocumented`` naming each type without a docstring."""
    info = mi.type_info(union)
    members = [t for t in getattr(info, "types", (info,)) if isinstance(t, mi.StructType)]
    problems = [f"{t.cls.__name__} has no docstring" for t in members if not t.cls.__doc__]
    if problems:
        raise Undocumented(PAGE, problems)
    base = next(c for c in members[0].cls.__mro__[1:] if all(issubclass(t.cls, c) for t in members))
    common = mi.type_info(base)
    assert isinstance(common, mi.StructType)
    shared = frozenset(f.name for f in common.fields)
    rows = [
        [
            f"[{t.cls.__name__}](#{t.cls.__name__.lower()})",
            code(str(t.tag)),
            code(stream_of(t.cls.aggregate)),  # type: ignore[attr-defined]
            _first_sentence(t.cls),
        ]
        for t in members
    ]
    blocks = [
        generated("the event union of sluice/events/__init__.py"),
        INTRO,
        "## Fields every event carries",
        _doc(base),
        _fields(common),
        "## Event types",
        table(["Type", "Tag", "Stream", "What happened"], rows),
    ]
    for t in members:
        aggregate = t.cls.aggregate  # type: ignore[attr-defined]
        blocks += [
            f"### {t.cls.__name__}",
            _doc(t.cls),
            f"Tag {code(str(t.tag))} in `{t.tag_field}`; aggregate {code(aggregate)}, stream"
            f" {code(stream_of(aggregate))}.",
            _fields(t, skip=shared),
        ]
    seen = {t.cls for t in members} | {base}
    shapes = [s for t in members for f in t.fields for s in _nested(f.type, seen)]
    if shapes:
        blocks.append("## Shapes inside events")
        for shape in shapes:
            blocks += [f"### {shape.cls.__name__}", _doc(shape.cls), _fields(shape)]
    return page(*blocks)
