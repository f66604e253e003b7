"""Payloads: JSON objects split into one column per key (rebuilt by ``payload_rebuild``).

sluice's payloads are msgspec's JSON of a tagged event struct: one object, the
``type`` tag first, then every field in declaration order, no whitespace. Rows
whose payloads have the same keys in the same order form a *shape*; each key
becomes a column (see ``layout.Field``), where a value is stored in the first
of these forms that fits: the row's own event id or trace id (``LinkVisited``
repeats both), a UTC datetime as microseconds, 64 hex digits as 32 bytes
(visitor hashes), else its JSON text in a dictionary (codes, browsers,
referrer hosts, ``null``, ``false``: each distinct text once).

This works for every event type, and for fields added later, without a codec
per type. Columns are classified a column at a time (each distinct value
once), then the decoder rebuilds the shape's payloads from the finished
columns and every payload that does not come back byte for byte (whitespace,
other spellings of a string or number, duplicate keys) is taken out of the
shape and kept as bytes, as are payloads that are not a JSON object at all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from itertools import compress, repeat
from operator import eq, itemgetter, not_
from typing import cast

import msgspec

from sluice.history import layout, times
from sluice.history.packing import pack_ints, pack_texts
from sluice.history.payload_rebuild import decode_shape

_HEX64 = re.compile(r"[0-9a-f]{64}")
# Strings msgspec writes between quotes as they are (no escapes): the row's ids must be.
_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')
_json_decode = msgspec.json.Decoder().decode
_json_encode = msgspec.json.Encoder().encode

Stored = str | int | None
Value = tuple[int, Stored]  # kind, what is stored
_kind, _stored = itemgetter(0), itemgetter(1)
_ID_VALUES: dict[int, Value] = {
    layout.VALUE_EVENT_ID: (layout.VALUE_EVENT_ID, None),
    layout.VALUE_TRACE_ID: (layout.VALUE_TRACE_ID, None),
}
_UNWRITABLE = "\x00"  # the JSON text of a value msgspec cannot write: never rebuilds


class PayloadEncoder:
    """Collects payloads row by row; ``finish`` gives the column and the raw count."""

    def __init__(self) -> None:
        self._count = 0
        self._shapes: dict[tuple[str, ...], _ShapeRows] = {}
        self._raw: dict[int, bytes] = {}  # by row

    def append(self, payload: bytes, event_id: str, trace_id: str) -> None:
        row = self._count
        self._count += 1
        try:
            obj = _json_decode(payload)
        except msgspec.DecodeError:
            obj = None
        if type(obj) is not dict:
            self._raw[row] = payload
            return
        keys = tuple(obj)
        shape = self._shapes.get(keys)
        if shape is None:
            shape = self._shapes[keys] = _ShapeRows(list(keys))
        shape.append(row, payload, event_id, trace_id, tuple(obj.values()))

    def finish(self) -> tuple[layout.Payloads, int]:
        shape_ids = [0] * self._count
        layouts: list[layout.Shape] = []
        for shape in self._shapes.values():
            built, rejected = shape.build()
            self._raw.update(rejected)
            if built is not None:
                layouts.append(built)
                for row in shape.rows:
                    shape_ids[row] = len(layouts)
        raw = [self._raw[row] for row in sorted(self._raw)]
        column = layout.Payloads(
            shapes=pack_ints(shape_ids),
            layouts=layouts,
            raw_lengths=pack_ints([len(p) for p in raw]),
            raw=b"".join(raw),
        )
        return column, len(raw)


class _ShapeRows:
    """The rows of one shape, kept as they came until ``build``."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.rows: list[int] = []
        self.payloads: list[bytes] = []
        self.event_ids: list[str] = []
        self.trace_ids: list[str] = []
        self.values: list[tuple[object, ...]] = []

    def append(
        self, row: int, payload: bytes, event_id: str, trace_id: str, values: tuple[object, ...]
    ) -> None:
        self.rows.append(row)
        self.payloads.append(payload)
        self.event_ids.append(event_id)
        self.trace_ids.append(trace_id)
        self.values.append(values)

    def build(self) -> tuple[layout.Shape | None, list[tuple[int, bytes]]]:
        """The shape's columns, and the rows (with their payloads) they did not rebuild
        exactly, which are left out.

        A row rebuilds or not by its own values alone, so a second pass without the
        rows the first one rejected rebuilds every row it keeps; a third is never run.
        """
        rejected: list[tuple[int, bytes]] = []
        for _ in range(2):
            if not self.rows:
                break
            try:
                shape = self._columns()
                rebuilt = decode_shape(shape, self.event_ids, self.trace_ids)
            except (msgspec.MsgspecError, UnicodeError):  # a key msgspec cannot write
                break
            if rebuilt == self.payloads:
                return shape, rejected
            keep = list(map(eq, rebuilt, self.payloads))
            rejected += compress(zip(self.rows, self.payloads, strict=True), map(not_, keep))
            self._keep_only(keep)
        rejected += zip(self.rows, self.payloads, strict=True)
        self.rows = []
        return None, rejected

    def _keep_only(self, keep: list[bool]) -> None:
        self.rows = list(compress(self.rows, keep))
        self.payloads = list(compress(self.payloads, keep))
        self.event_ids = list(compress(self.event_ids, keep))
        self.trace_ids = list(compress(self.trace_ids, keep))
        self.values = list(compress(self.values, keep))

    def _columns(self) -> layout.Shape:
        columns = list(zip(*self.values, strict=True))
        fields = [_field(*_classify(c, self.event_ids, self.trace_ids)) for c in columns]
        return layout.Shape(keys=self.keys, rows=len(self.rows), fields=fields)


def _classify(
    column: Sequence[object], event_ids: list[str], trace_ids: list[str]
) -> tuple[bytes, list[Stored]]:
    """Each value's kind and stored form: the row's own ids where they are the value,
    else by what the value is, each distinct value looked at once."""
    count = len(column)
    ids_at: dict[int, Value] = {}
    for ids, kind in ((trace_ids, layout.VALUE_TRACE_ID), (event_ids, layout.VALUE_EVENT_ID)):
        same = list(map(eq, column, ids))
        if same.count(True) == count and _PLAIN.fullmatch("".join(ids)):
            return bytes((kind,)) * count, [None] * count
        for i in compress(range(count), same):  # event ids win: they come second
            if type(column[i]) is str and _PLAIN.fullmatch(ids[i]):
                ids_at[i] = _ID_VALUES[kind]
    values = _by_value(list(column))
    for i, value in ids_at.items():
        values[i] = value
    return bytes(map(_kind, values)), list(map(_stored, values))


def _by_value(column: list[object]) -> list[Value]:
    """``_value`` of each value, once per distinct value. Values are their own keys
    unless the column mixes numbers of two types (True == 1 == 1.0: then keyed by
    type and value)."""
    keys: list[object] = column
    if len(set(map(type, column)) & {bool, int, float}) > 1:
        keys = list(zip(map(type, column), column, strict=True))
    try:
        distinct = dict(zip(keys, column, strict=True))
        known = {key: _value(value) for key, value in distinct.items()}
    except TypeError:  # arrays or objects: not hashable
        return [_value(v) for v in column]
    return list(map(known.__getitem__, keys))


def _value(value: object) -> Value:
    if type(value) is str:
        micros = times.micros(value, times.JSON) if value.endswith("Z") else None
        if micros is not None:
            return layout.VALUE_TIME, micros
        if len(value) == 64 and _HEX64.fullmatch(value):
            return layout.VALUE_HEX, value
    try:
        return layout.VALUE_JSON, _json_encode(value).decode()
    except (msgspec.MsgspecError, UnicodeError):  # lone surrogates
        return layout.VALUE_JSON, _UNWRITABLE


def _field(kinds: bytes, stored: list[Stored]) -> layout.Field:
    """The column of one key over its shape's rows."""
    json, json_refs = _dictionary(cast(list[str], _of_kind(kinds, stored, layout.VALUE_JSON)))
    hexes, hex_refs = _dictionary(cast(list[str], _of_kind(kinds, stored, layout.VALUE_HEX)))
    micros = cast(list[int], _of_kind(kinds, stored, layout.VALUE_TIME))
    return layout.Field(
        kinds=kinds,
        json=pack_texts(json),
        json_refs=pack_ints(json_refs),
        hex=bytes.fromhex("".join(hexes)),
        hex_refs=pack_ints(hex_refs),
        times=pack_ints(micros, delta=True),
    )


def _of_kind(kinds: bytes, stored: list[Stored], kind: int) -> list[Stored]:
    """The stored values of the rows of one kind, in row order."""
    count = kinds.count(kind)
    if count == len(kinds):
        return stored
    return list(compress(stored, map(eq, kinds, repeat(kind)))) if count else []


def _dictionary(values: list[str]) -> tuple[list[str], list[int]]:
    """Distinct values, most frequent first (small references compress best), and the
    reference of each value."""
    entries = [value for value, _ in Counter(values).most_common()]
    index = {value: i for i, value in enumerate(entries)}
    return entries, list(map(index.__getitem__, values))
