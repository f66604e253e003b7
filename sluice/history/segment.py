"""Archive segments: rows of the events table in one compact, immutable, checked block.

``encode(rows)`` gives the bytes of a segment, ``decode(data)`` the very same
rows, byte for byte, or raises ``CorruptSegment`` (or ``UnsupportedSegmentVersion``):
never other rows. ``read_info`` reads what an index needs from the header
alone. The frame (magic, version, header, checksums) is described in
``frame``, the columns in ``layout``; the compact forms fit what sluice
writes, and every value that does not fit one is kept as it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat

import msgspec

from sluice.history import frame, layout
from sluice.history.errors import CorruptSegment
from sluice.history.frame import SegmentInfo, read_info
from sluice.history.packing import (
    INT64_MAX,
    INT64_MIN,
    pack_ints,
    pack_texts,
    unpack_ints,
    unpack_texts,
)
from sluice.history.payload_rebuild import decode_payloads
from sluice.history.payload_split import PayloadEncoder
from sluice.history.row_columns import (
    decode_created_at,
    decode_event_ids,
    decode_trace_ids,
    encode_created_at,
    encode_event_ids,
    encode_trace_ids,
)

__all__ = ["EventRow", "SegmentInfo", "decode", "encode", "read_info"]

# (seq, event_id, type, aggregate, payload, trace_id, created_at): a row of ``events``.
EventRow = tuple[int, str, str, str, bytes, str, str]

_body_decoder = msgspec.msgpack.Decoder(layout.Body)
# What a body that passed every checksum but is still inconsistent raises while it is
# read (a bug in a writer, not damage on disk): reported as corrupt, never as rows.
_INCONSISTENT = (msgspec.MsgspecError, ValueError, IndexError, KeyError, OverflowError)


def encode(rows: Sequence[EventRow]) -> bytes:
    """One segment holding ``rows`` (at least one), in the order given."""
    if not rows:
        raise ValueError("a segment holds at least one event")
    seqs, event_ids, types, aggregates, payloads, trace_ids, created_at = _columns(rows)
    pairs, kinds = _pairs(types, aggregates)
    encoder = PayloadEncoder()
    for payload, event_id, trace_id in zip(payloads, event_ids, trace_ids, strict=True):
        encoder.append(payload, event_id, trace_id)
    payload_column, raw_payloads = encoder.finish()
    body = layout.Body(
        seq=pack_ints(seqs, delta=True),
        kinds=pack_ints(kinds),
        types=pack_texts([t for t, _ in pairs]),
        aggregates=pack_texts([a for _, a in pairs]),
        event_ids=encode_event_ids(event_ids),
        trace_ids=encode_trace_ids(trace_ids),
        created_at=encode_created_at(created_at),
        payloads=payload_column,
    )
    header = frame.Header(
        count=len(rows),
        first_seq=min(seqs),
        last_seq=max(seqs),
        first_created_at=min(created_at),
        last_created_at=max(created_at),
        types=dict(Counter(types)),
        aggregates=sorted(set(aggregates)),
        raw_payloads=raw_payloads,
        body_size=0,
        columns_size=0,
    )
    return frame.seal(header, msgspec.msgpack.encode(body))


def decode(data: bytes) -> list[EventRow]:
    """The rows of a segment, exactly as they were given to ``encode``."""
    header, columns = frame.open_body(data)
    try:
        return _rows(_body_decoder.decode(columns), header)
    except _INCONSISTENT as exc:
        raise CorruptSegment(f"segment columns are inconsistent: {exc}") from None


def _columns(
    rows: Sequence[EventRow],
) -> tuple[list[int], list[str], list[str], list[str], list[bytes], list[str], list[str]]:
    """The seven columns of ``rows``, each value checked to be what the table holds."""
    if any(len(row) != 7 for row in rows):
        raise ValueError("an events row has seven columns")
    seqs, event_ids, types, aggregates, payloads, trace_ids, created_at = map(
        list, zip(*rows, strict=True)
    )
    if any(type(s) is not int or not INT64_MIN <= s <= INT64_MAX for s in seqs):
        raise TypeError("seq must be an integer within int64")
    if any(type(p) is not bytes for p in payloads):
        raise TypeError("payload must be bytes")
    for column in (event_ids, types, aggregates, trace_ids, created_at):
        if any(type(v) is not str for v in column):
            raise TypeError("event_id, type, aggregate, trace_id, created_at must be str")
    return seqs, event_ids, types, aggregates, payloads, trace_ids, created_at


def _pairs(types: list[str], aggregates: list[str]) -> tuple[list[tuple[str, str]], list[int]]:
    """The distinct (type, aggregate) pairs and each row's index into them."""
    index: dict[tuple[str, str], int] = {}
    kinds = [index.setdefault(pair, len(index)) for pair in zip(types, aggregates, strict=True)]
    return list(index), kinds


def _rows(body: layout.Body, header: frame.Header) -> list[EventRow]:
    count = header.count
    seqs = unpack_ints(body.seq, count)
    kinds = unpack_ints(body.kinds, count)
    type_names = unpack_texts(body.types, None)
    aggregate_names = unpack_texts(body.aggregates, len(type_names))
    event_ids = decode_event_ids(body.event_ids, count)
    trace_ids = decode_trace_ids(body.trace_ids, count)
    created_at = decode_created_at(body.created_at, count)
    times = set(created_at)  # a few thousand distinct ones
    _check_header(header, seqs, times, [(t, kinds.count(i)) for i, t in enumerate(type_names)])
    payloads = decode_payloads(body.payloads, event_ids, trace_ids)
    if len(type_names) == 1:  # one type, as in most segments
        types: Iterable[str] = repeat(type_names[0], count)
        aggregates: Iterable[str] = repeat(aggregate_names[0], count)
    else:
        types = map(type_names.__getitem__, kinds)
        aggregates = map(aggregate_names.__getitem__, kinds)
    columns = (seqs, event_ids, types, aggregates, payloads, trace_ids, created_at)
    return list(zip(*columns, strict=True))


def _check_header(
    header: frame.Header, seqs: Sequence[int], created_at: set[str], types: list[tuple[str, int]]
) -> None:
    """The rows must agree with the header an index trusted without reading them."""
    counts: Counter[str] = Counter()
    for name, count in types:
        counts[name] += count
    if (
        len(seqs) != header.count
        or (min(seqs), max(seqs)) != (header.first_seq, header.last_seq)
        or (min(created_at), max(created_at)) != (header.first_created_at, header.last_created_at)
        or counts != header.types
    ):
        raise CorruptSegment("segment columns do not agree with its header")
