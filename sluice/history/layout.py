"""The body of a segment, format version 1: one MessagePack array, column by column.

The body holds the rows of the ``events`` table column by column, in row (seq)
order. MessagePack frames the columns (each is a ``bin`` or ``str``, so any
language reads them); the columns' own bytes use four encodings:

- **int column** (``packing.pack_ints``): one ASCII array typecode
  (``B H I Q`` unsigned, ``b h i q`` signed: 1, 2, 4 or 8 bytes), one mode byte
  (0 plain, 1 delta: each value is the previous one plus the stored number,
  the first from 0), then the little-endian values as byte planes (byte 0 of
  every value, then byte 1 of every value, ...).
- **kind column**: one byte per row choosing which of a column's encodings
  holds that row's value; the values of each kind follow in row order.
- **text column** (``packing.pack_texts``): u32 LE size of an int column of
  UTF-8 lengths, that column, then the UTF-8 texts back to back.
- **planes of N bytes**: fixed-width binary values transposed like int columns.

Dictionaries list each distinct value once, most frequent first, so the
references into them are small numbers with skewed high bytes.
"""

from __future__ import annotations

import msgspec

# Kinds of the row columns.
EVENT_ID_UUID, EVENT_ID_TEXT = 0, 1
TRACE_ID_EMPTY, TRACE_ID_HEX, TRACE_ID_TEXT = 0, 1, 2
CREATED_AT_MICROS, CREATED_AT_TEXT = 0, 1

# Kinds of a payload field's value.
VALUE_JSON = 0  # in the field's dictionary of JSON texts (any JSON value)
VALUE_HEX = 1  # 64 lowercase hex digits, in the field's dictionary of 32-byte values
VALUE_TIME = 2  # a UTC datetime as msgspec writes it ("...Z"), microseconds
VALUE_EVENT_ID = 3  # the row's event_id, verbatim
VALUE_TRACE_ID = 4  # the row's trace_id, verbatim

UUID_MILLIS = 6  # bytes of a UUID stored as an integer (UUIDv7: its Unix milliseconds)
UUID_TAIL = 10  # the rest, as planes
TRACE_BYTES = 16  # 32 hex digits
HEX_BYTES = 32  # 64 hex digits: keyed visitor hashes


class EventIds(msgspec.Struct, array_like=True, frozen=True):
    """``kinds``: EVENT_ID_*. UUIDs (canonical lowercase 8-4-4-4-12 only) as their first
    UUID_MILLIS bytes, big-endian, in the delta int column ``millis``, and their last
    UUID_TAIL bytes as planes (``tails``); other ids in the text column ``texts``."""

    kinds: bytes
    millis: bytes
    tails: bytes
    texts: bytes


class TraceIds(msgspec.Struct, array_like=True, frozen=True):
    """``kinds``: TRACE_ID_*. Empty ids take no space; 32 lowercase hex digits are 16 bytes
    each in ``hex`` (plain, they are random); other ids in the text column ``texts``."""

    kinds: bytes
    hex: bytes
    texts: bytes


class CreatedAt(msgspec.Struct, array_like=True, frozen=True):
    """``kinds``: CREATED_AT_*. ``isoformat()`` of UTC times as microseconds: each distinct
    time once, in order of first appearance, in the delta int column ``micros`` (the
    events of a group commit share one), and per row the delta int column ``refs`` of
    indexes into it; other text in the text column ``texts``."""

    kinds: bytes
    micros: bytes
    refs: bytes
    texts: bytes


class Field(msgspec.Struct, array_like=True, frozen=True):
    """One key of a payload shape, over the rows of that shape. ``kinds``: VALUE_*.
    ``json``: text column of distinct JSON texts, ``json_refs`` int column into it;
    ``hex``: 32-byte values back to back, ``hex_refs`` int column into them;
    ``times``: delta int column of microseconds."""

    kinds: bytes
    json: bytes
    json_refs: bytes
    hex: bytes
    hex_refs: bytes
    times: bytes


class Shape(msgspec.Struct, array_like=True, frozen=True):
    """Payloads that are one JSON object with these keys in this order, written without
    whitespace, as msgspec writes events: ``{"k1":v1,"k2":v2}``. ``rows``: how many."""

    keys: list[str]
    rows: int
    fields: list[Field]


class Payloads(msgspec.Struct, array_like=True, frozen=True):
    """``shapes``: int column, per row 0 for a payload stored as bytes (in ``raw``, with
    their lengths in the int column ``raw_lengths``), else 1 + its index in ``layouts``."""

    shapes: bytes
    layouts: list[Shape]
    raw_lengths: bytes
    raw: bytes


class Body(msgspec.Struct, array_like=True, frozen=True):
    """The columns of ``count`` rows (``count`` is in the header). ``seq``: delta int
    column. ``kinds``: int column, per row an index into the (type, aggregate) pairs
    that the text columns ``types`` and ``aggregates`` list."""

    seq: bytes
    kinds: bytes
    types: bytes
    aggregates: bytes
    event_ids: EventIds
    trace_ids: TraceIds
    created_at: CreatedAt
    payloads: Payloads
