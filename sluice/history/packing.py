"""Column packing: integers as byte planes, fixed-width binary values, kind-merged columns.

Everything here works on whole columns with C-level loops (``array``, extended
slices, ``map``, ``itertools``): a segment of 100,000 events is decoded in a
few dozen such passes, never a Python statement per value and column.

Integers are stored as *byte planes* (all first bytes, then all second bytes,
...) of little-endian fixed-width values: the planes that only hold small
numbers (deltas of a sequence, indexes into a short dictionary) become runs
that zstd squeezes to almost nothing, and the ones that hold random bits stay
as they are.
"""

from __future__ import annotations

import binascii
import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate
from operator import sub
from typing import TypeVar

from sluice.history.errors import CorruptSegment

# array typecodes, narrowest first; their sizes are what the format says on every platform
# CPython runs on, checked below rather than assumed.
_UNSIGNED = (("B", 0, 0xFF), ("H", 0, 0xFFFF), ("I", 0, 0xFFFF_FFFF), ("Q", 0, 2**64 - 1))
_SIGNED = (
    ("b", -(2**7), 2**7 - 1),
    ("h", -(2**15), 2**15 - 1),
    ("i", -(2**31), 2**31 - 1),
    ("q", -(2**63), 2**63 - 1),
)
_WIDTHS = {code: width for code, width in zip("BHIQbhiq", (1, 2, 4, 8) * 2, strict=True)}
if any(array(code).itemsize != width for code, width in _WIDTHS.items()):
    raise ImportError("sluice.history needs array typecodes of 1, 2, 4 and 8 bytes")

T = TypeVar("T")
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_PLAIN, _DELTA = 0, 1


def pack_ints(values: Sequence[int], *, delta: bool = False) -> bytes:
    """Pack integers (each within int64) as ``typecode, mode, planes``.

    ``delta``: store the differences to the previous value (the first to 0), for
    columns that grow steadily (seq, timestamps); kept plain if a difference
    would leave int64.
    """
    mode = _PLAIN
    if delta and values:
        deltas = [values[0], *map(sub, values[1:], values[:-1])]
        if min(deltas) >= INT64_MIN and max(deltas) <= INT64_MAX:
            values, mode = deltas, _DELTA
    code = _typecode(values)
    packed = array(code, values)
    return code.encode() + bytes((mode,)) + to_planes(_little_endian(packed), _WIDTHS[code])


def unpack_ints(data: bytes, count: int | None) -> Sequence[int]:
    """The integers of a column written by ``pack_ints``: ``count`` of them, or as
    many as it holds if ``count`` is None (dictionaries: any size). A plain column
    comes as an ``array``: mapped over as it is, it never holds an int object per value."""
    if len(data) < 2 or chr(data[0]) not in _WIDTHS or data[1] not in (_PLAIN, _DELTA):
        raise CorruptSegment("an integer column has no valid type byte")
    code = chr(data[0])
    width = _WIDTHS[code]
    if count is None:
        count = (len(data) - 2) // width
    if len(data) - 2 != count * width:
        raise CorruptSegment(f"an integer column holds {len(data) - 2} bytes, not {count} values")
    values = array(code, from_planes(data[2:], width))
    if sys.byteorder == "big":
        values.byteswap()
    if data[1] == _DELTA:
        return list(accumulate(values))
    return values


def _typecode(values: Sequence[int]) -> str:
    if not values:
        return "B"
    low, high = min(values), max(values)
    for code, least, most in _UNSIGNED if low >= 0 else _SIGNED:
        if least <= low and high <= most:
            return code
    raise ValueError(f"integers outside int64 in a column: {low}..{high}")


def _little_endian(values: array[int]) -> bytes:
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def to_planes(data: bytes, width: int) -> bytes:
    """Transpose ``width``-byte records into planes: byte 0 of each, then byte 1, ..."""
    if width == 1:
        return data
    return b"".join(data[i::width] for i in range(width))


def from_planes(data: bytes, width: int) -> bytes:
    """The inverse of ``to_planes``."""
    if width == 1 or not data:
        return data
    if len(data) % width:
        raise CorruptSegment(f"a column of {width}-byte values holds {len(data)} bytes")
    count = len(data) // width
    out = bytearray(len(data))
    for i in range(width):
        out[i::width] = data[i * count : (i + 1) * count]
    return bytes(out)


def hex_strings(
    raw: bytes, width: int, dashes: Sequence[int] = (), before: str = "", after: str = ""
) -> list[str]:
    """Lowercase hex of each ``width``-byte record of ``raw``, between ``before`` and
    ``after``, with '-' before the hex digits at ``dashes`` (UUIDs: 8, 12, 16, 20).

    No Python statement per record: ``bytes.hex`` puts a separator between records
    and one split cuts them; with dashes, a strided copy per output character
    builds the text first (half the cost of slicing five pieces a record).
    """
    if len(raw) % width:
        raise CorruptSegment(f"a column of {width}-byte values holds {len(raw)} bytes")
    if not raw:
        return []
    text = _dashed(raw, width, dashes) if dashes else raw.hex("\n", width)
    if before or after:
        text = before + text.replace("\n", f"{after}\n{before}") + after
    return text.split("\n")


def _dashed(raw: bytes, width: int, dashes: Sequence[int]) -> str:
    """Hex of each record with dashes, records separated by newlines."""
    count = len(raw) // width
    digits = binascii.hexlify(raw)
    per_in = 2 * width
    per_out = per_in + len(dashes) + 1  # the last one a newline
    out = bytearray(b"\n" * (per_out * count))
    shift = 0
    for i in range(per_in):
        if i in dashes:
            out[i + shift :: per_out] = b"-" * count
            shift += 1
        out[i + shift :: per_out] = digits[i::per_in]
    return out[:-1].decode("ascii")


def merge_kinds(kinds: Sequence[int], sources: Sequence[Sequence[T]]) -> list[T]:
    """Interleave ``sources`` by a kind byte per row: row i takes the next value of
    ``sources[kinds[i]]``. Each source must hold exactly as many values as its kind has rows."""
    for kind, source in enumerate(sources):
        if kinds.count(kind) != len(source):
            raise CorruptSegment(f"kind {kind} has {kinds.count(kind)} rows, {len(source)} values")
    if sum(map(len, sources)) != len(kinds):
        raise CorruptSegment("a kind column names a kind that has no values")
    for source in sources:
        if len(source) == len(kinds):
            return list(source)
    iterators: list[Iterator[T]] = [iter(source) for source in sources]
    return list(map(next, map(iterators.__getitem__, kinds)))


def pack_texts(texts: Sequence[str]) -> bytes:
    """Strings as UTF-8, each followed by its length in a separate column (see ``unpack_texts``)."""
    encoded = [text.encode() for text in texts]
    lengths = pack_ints([len(e) for e in encoded])
    return len(lengths).to_bytes(4, "little") + lengths + b"".join(encoded)


def unpack_texts(data: bytes, count: int | None) -> list[str]:
    """The strings of a column written by ``pack_texts``: ``count`` of them, or as many
    as it holds if ``count`` is None."""
    if len(data) < 4:
        raise CorruptSegment("a text column is cut short")
    size = int.from_bytes(data[:4], "little")
    lengths = unpack_ints(data[4 : 4 + size], count)
    blob = data[4 + size :]
    if sum(lengths) != len(blob):
        raise CorruptSegment("a text column's lengths do not add up to its text")
    ends = list(accumulate(lengths))
    starts = [0, *ends[:-1]] if ends else []
    try:
        return [blob[s:e].decode() for s, e in zip(starts, ends, strict=True)]
    except UnicodeDecodeError as exc:
        raise CorruptSegment(f"a text column is not UTF-8: {exc}") from None
