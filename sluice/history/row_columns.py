"""The events table's own columns (all but the payload), to and from segment columns.

Each column has a compact kind for the values sluice writes (UUIDv7 event ids,
W3C trace ids, ``isoformat()`` times) and a text kind for anything else, so a
row the compact form cannot hold exactly still round-trips.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Sequence

from sluice.history import layout, times
from sluice.history.errors import CorruptSegment
from sluice.history.packing import (
    from_planes,
    hex_strings,
    merge_kinds,
    pack_ints,
    pack_texts,
    to_planes,
    unpack_ints,
    unpack_texts,
)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_UUID_DASHES = (8, 12, 16, 20)


def encode_event_ids(ids: Sequence[str]) -> layout.EventIds:
    kinds = bytearray()
    millis: list[int] = []
    tails: list[bytes] = []
    texts: list[str] = []
    for event_id in ids:
        if _UUID.fullmatch(event_id):
            raw = bytes.fromhex(event_id.replace("-", ""))
            kinds.append(layout.EVENT_ID_UUID)
            millis.append(int.from_bytes(raw[: layout.UUID_MILLIS], "big"))
            tails.append(raw[layout.UUID_MILLIS :])
        else:
            kinds.append(layout.EVENT_ID_TEXT)
            texts.append(event_id)
    return layout.EventIds(
        kinds=bytes(kinds),
        millis=pack_ints(millis, delta=True),
        tails=to_planes(b"".join(tails), layout.UUID_TAIL),
        texts=pack_texts(texts),
    )


def decode_event_ids(column: layout.EventIds, count: int) -> list[str]:
    uuids = column.kinds.count(layout.EVENT_ID_UUID)
    millis = unpack_ints(column.millis, uuids)
    if millis and (min(millis) < 0 or max(millis) >= 1 << 48):
        raise CorruptSegment("an event id's milliseconds do not fit in 48 bits")
    raw = bytearray(16 * uuids)
    big_endian = array("Q", millis)
    if sys.byteorder == "little":
        big_endian.byteswap()
    heads = big_endian.tobytes()
    for i in range(layout.UUID_MILLIS):  # the low 6 of each 8 big-endian bytes
        raw[i::16] = heads[2 + i :: 8]
    tails = from_planes(column.tails, layout.UUID_TAIL)
    if len(tails) != layout.UUID_TAIL * uuids:
        raise CorruptSegment("event id tails do not match the number of UUIDs")
    for i in range(layout.UUID_TAIL):
        raw[layout.UUID_MILLIS + i :: 16] = tails[i :: layout.UUID_TAIL]
    texts = unpack_texts(column.texts, count - uuids)
    return _merged(column.kinds, count, [hex_strings(bytes(raw), 16, _UUID_DASHES), texts])


def encode_trace_ids(ids: Sequence[str]) -> layout.TraceIds:
    kinds = bytearray()
    hexes: list[str] = []
    texts: list[str] = []
    for trace_id in ids:
        if not trace_id:
            kinds.append(layout.TRACE_ID_EMPTY)
        elif _HEX32.fullmatch(trace_id):
            kinds.append(layout.TRACE_ID_HEX)
            hexes.append(trace_id)
        else:
            kinds.append(layout.TRACE_ID_TEXT)
            texts.append(trace_id)
    return layout.TraceIds(
        kinds=bytes(kinds), hex=bytes.fromhex("".join(hexes)), texts=pack_texts(texts)
    )


def decode_trace_ids(column: layout.TraceIds, count: int) -> list[str]:
    empty = [""] * column.kinds.count(layout.TRACE_ID_EMPTY)
    hexes = hex_strings(column.hex, layout.TRACE_BYTES)
    texts = unpack_texts(column.texts, column.kinds.count(layout.TRACE_ID_TEXT))
    return _merged(column.kinds, count, [empty, hexes, texts])


def encode_created_at(values: Sequence[str]) -> layout.CreatedAt:
    kinds = bytearray()
    index: dict[str, int] = {}  # canonical text: its index among the distinct times
    micros: list[int] = []
    refs: list[int] = []
    texts: list[str] = []
    for text in values:
        ref = index.get(text)
        if ref is None and (value := times.micros(text, times.ISO)) is not None:
            ref = index[text] = len(micros)
            micros.append(value)
        if ref is None:
            kinds.append(layout.CREATED_AT_TEXT)
            texts.append(text)
        else:
            kinds.append(layout.CREATED_AT_MICROS)
            refs.append(ref)
    return layout.CreatedAt(
        kinds=bytes(kinds),
        micros=pack_ints(micros, delta=True),
        refs=pack_ints(refs, delta=True),
        texts=pack_texts(texts),
    )


def decode_created_at(column: layout.CreatedAt, count: int) -> list[str]:
    distinct = times.format_column(unpack_ints(column.micros, None), times.ISO)
    refs = unpack_ints(column.refs, column.kinds.count(layout.CREATED_AT_MICROS))
    texts = unpack_texts(column.texts, column.kinds.count(layout.CREATED_AT_TEXT))
    return _merged(column.kinds, count, [list(map(distinct.__getitem__, refs)), texts])


def _merged(kinds: bytes, count: int, sources: list[list[str]]) -> list[str]:
    if len(kinds) != count:
        raise CorruptSegment(f"a kind column has {len(kinds)} rows, the segment {count}")
    return merge_kinds(kinds, sources)
