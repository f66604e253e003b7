"""Payloads rebuilt from their columns, byte for byte (the encoder is ``payload_split``).

A shape's payloads are rebuilt a column at a time: each key's texts for all
rows (dictionary lookups, hex, formatted times, the rows' own ids), texts that
are the same on every row folded into the constant text between keys, then
one join per row. There is no Python statement per row and field: every pass
over the rows is a ``map``, a slice or a join in C. ``payload_split`` runs this
very code on the columns it built and keeps out of them any payload that does
not come back byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, repeat
from operator import add, eq
from typing import cast

import msgspec

from sluice.history import layout, times
from sluice.history.errors import CorruptSegment
from sluice.history.packing import hex_strings, merge_kinds, unpack_ints, unpack_texts

_json_encode = msgspec.json.Encoder().encode


def key_texts(keys: Sequence[str]) -> list[str]:
    """What precedes each value in the object: ``{"k1":``, then ``,"k2":``, ..."""
    return [("," if i else "{") + _json_encode(k).decode() + ":" for i, k in enumerate(keys)]


def decode_payloads(
    column: layout.Payloads, event_ids: list[str], trace_ids: list[str]
) -> list[bytes]:
    """The payload of each row; ``event_ids`` and ``trace_ids`` are the rows' own."""
    count = len(event_ids)
    shape_ids = unpack_ints(column.shapes, count)
    sources = [_raw(column, shape_ids.count(0))]
    for number, shape in enumerate(column.layouts, start=1):
        if len(sources[0]) == 0 and shape.rows == count:  # the common case: one shape
            return decode_shape(shape, event_ids, trace_ids)
        mine = list(map(eq, shape_ids, repeat(number)))
        ids, traces = list(compress(event_ids, mine)), list(compress(trace_ids, mine))
        sources.append(decode_shape(shape, ids, traces))
    return merge_kinds(shape_ids, sources)


def _raw(column: layout.Payloads, count: int) -> list[bytes]:
    lengths = unpack_ints(column.raw_lengths, count)
    if sum(lengths) != len(column.raw):
        raise CorruptSegment("raw payload lengths do not add up to the raw payloads")
    out, start, raw = [], 0, column.raw
    for length in lengths:
        out.append(raw[start : start + length])
        start += length
    return out


def decode_shape(shape: layout.Shape, event_ids: list[str], trace_ids: list[str]) -> list[bytes]:
    """The payloads of one shape's rows, joined from as few pieces as it takes: the text
    between two values goes into the texts of the value after it where those come from
    a dictionary or a formatter (per distinct value, not per row)."""
    rows = shape.rows
    if len(shape.fields) != len(shape.keys) or len(event_ids) != rows:
        raise CorruptSegment("a payload shape does not match its rows")
    parts: list[str | list[str]] = []
    text = ""  # written by every row, not yet in a part
    for key, field in zip(key_texts(shape.keys), shape.fields, strict=True):
        text += key
        kinds = field.kinds
        if len(kinds) != rows:
            raise CorruptSegment(f"a payload field has {len(kinds)} rows, its shape {rows}")
        uniform = kinds[0] if rows and kinds.count(kinds[0]) == rows else None
        if uniform in (layout.VALUE_EVENT_ID, layout.VALUE_TRACE_ID):
            parts += [text + '"', event_ids if uniform == layout.VALUE_EVENT_ID else trace_ids]
            text = '"'
        elif (constant := _constant(field, uniform)) is not None:
            text += constant
        else:
            parts.append(_texts(field, uniform, event_ids, trace_ids, text))
            text = ""
    parts.append(text + "}" if shape.keys else "{}")
    if len(parts) == 1:  # every field the same on every row
        return [cast(str, parts[0]).encode()] * rows
    columns = [repeat(p, rows) if isinstance(p, str) else p for p in parts]
    return list(map(str.encode, map("".join, zip(*columns, strict=True))))


def _constant(field: layout.Field, uniform: int | None) -> str | None:
    """The one JSON text of a field that has it on every row, if it does."""
    if uniform != layout.VALUE_JSON:
        return None
    entries = unpack_texts(field.json, None)
    if len(entries) != 1 or any(unpack_ints(field.json_refs, len(field.kinds))):
        return None
    return entries[0]


def _texts(
    field: layout.Field,
    uniform: int | None,
    event_ids: list[str],
    trace_ids: list[str],
    before: str,
) -> list[str]:
    """Each row's ``before`` and JSON text of ``field``."""
    kinds = field.kinds
    if uniform is not None:
        return _of_kind(field, uniform, kinds, event_ids, trace_ids, before)
    sources = [_of_kind(field, k, kinds, event_ids, trace_ids, before) for k in range(5)]
    return merge_kinds(kinds, sources)


def _of_kind(
    field: layout.Field,
    kind: int,
    kinds: bytes,
    event_ids: list[str],
    trace_ids: list[str],
    before: str,
) -> list[str]:
    """``before`` and the JSON text of the rows of one kind, in row order."""
    count = kinds.count(kind)
    if kind == layout.VALUE_JSON:
        entries = [before + entry for entry in unpack_texts(field.json, None)]
        return list(map(entries.__getitem__, unpack_ints(field.json_refs, count)))
    if kind == layout.VALUE_HEX:
        entries = hex_strings(field.hex, layout.HEX_BYTES, before=before + '"', after='"')
        return list(map(entries.__getitem__, unpack_ints(field.hex_refs, count)))
    if kind == layout.VALUE_TIME:
        micros = unpack_ints(field.times, count)
        return times.format_column(micros, times.JSON, before=before + '"', after='"')
    if kind not in (layout.VALUE_EVENT_ID, layout.VALUE_TRACE_ID):
        raise CorruptSegment(f"a payload field has values of unknown kind {kind}")
    ids = compress(
        event_ids if kind == layout.VALUE_EVENT_ID else trace_ids, map(eq, kinds, repeat(kind))
    )
    return list(map(add, repeat(before + '"'), map(add, ids, repeat('"'))))
