"""The frame of a segment: what surrounds the columns, and what proves they are intact.

Byte layout (all integers little-endian)::

    offset    size  what
    0         4     magic b"SLHS" (sluice history segment)
    4         1     format version (1)
    5         4     header size H (u32)
    9         H     header: MessagePack array, see ``Header``
    9+H       4     CRC32 of bytes [0, 9+H): the header alone can be trusted
    13+H      B     body: one zstd frame (content size and XXH64 checksum written)
                    of the MessagePack ``layout.Body``; B is in the header
    13+H+B    16    BLAKE2b-128 of every byte before it

The first 9 bytes, the header's CRC32 and the closing digest keep their place
in every format version, so any reader can tell a damaged segment from a newer
one: the version byte is only believed once the header's CRC32 holds.
``read_info`` reads the header alone (an index scan reads a few hundred bytes a
segment); ``open_body`` checks the digest before it decompresses anything.
"""

from __future__ import annotations

import hashlib
import zlib

import msgspec
import zstandard

from sluice.history.errors import CorruptSegment, UnsupportedSegmentVersion

MAGIC = b"SLHS"
VERSION = 1
PREFIX_SIZE = 9  # magic, version, header size
_CRC_SIZE = 4
_DIGEST_SIZE = 16
# Level 9: a few times slower to write than level 3 and a few percent smaller; reading
# speed does not depend on it. Segments are written once, in the background.
_LEVEL = 9
# A damaged header could claim any size; no segment of sluice's comes near this.
_MAX_BODY = 1 << 31


class SegmentInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What an index of segments needs, read from the header alone.

    Seqs and times are the lowest and highest in the segment (``created_at`` compared
    as text, as the events table's queries do); ``types`` counts events per type;
    ``raw_payloads`` counts payloads kept as bytes rather than split into fields
    (a figure to watch: a new event shape the encoder cannot split costs space);
    ``size`` is the whole segment in bytes.
    """

    count: int
    first_seq: int
    last_seq: int
    first_created_at: str
    last_created_at: str
    types: dict[str, int]
    aggregates: list[str]
    raw_payloads: int
    size: int


class Header(msgspec.Struct, array_like=True, frozen=True):
    """The header as stored: ``SegmentInfo`` without ``size``, and the body's two sizes."""

    count: int
    first_seq: int
    last_seq: int
    first_created_at: str
    last_created_at: str
    types: dict[str, int]
    aggregates: list[str]
    raw_payloads: int
    body_size: int  # compressed, as stored
    columns_size: int  # decompressed


_header_decoder = msgspec.msgpack.Decoder(Header)


def seal(header: Header, columns: bytes) -> bytes:
    """The segment holding ``columns`` (the MessagePack body) under ``header``.

    ``header.body_size`` and ``columns_size`` are filled in here."""
    compressor = zstandard.ZstdCompressor(level=_LEVEL, write_checksum=True)
    body = compressor.compress(columns)
    header = msgspec.structs.replace(header, body_size=len(body), columns_size=len(columns))
    encoded = msgspec.msgpack.encode(header)
    head = MAGIC + bytes((VERSION,)) + len(encoded).to_bytes(4, "little") + encoded
    head += zlib.crc32(head).to_bytes(_CRC_SIZE, "little")
    segment = head + body
    return segment + hashlib.blake2b(segment, digest_size=_DIGEST_SIZE).digest()


def info_size(prefix: bytes) -> int:
    """How many bytes from the start ``read_info`` needs, given the first PREFIX_SIZE."""
    _check_prefix(prefix)
    return PREFIX_SIZE + int.from_bytes(prefix[5:9], "little") + _CRC_SIZE


def read_info(data: bytes) -> SegmentInfo:
    """The header of a segment, from the segment or any start of it that holds the header."""
    header = _read_header(data)
    size = info_size(data) + header.body_size + _DIGEST_SIZE
    fields = msgspec.structs.asdict(header)
    del fields["body_size"], fields["columns_size"]
    return SegmentInfo(**fields, size=size)


def open_body(data: bytes) -> tuple[Header, bytes]:
    """The header and the decompressed body of a whole segment, every check passed."""
    header = _read_header(data)
    expected = info_size(data) + header.body_size + _DIGEST_SIZE
    if len(data) != expected:
        raise CorruptSegment(f"segment is {len(data)} bytes, its header says {expected}")
    digest = hashlib.blake2b(data[:-_DIGEST_SIZE], digest_size=_DIGEST_SIZE).digest()
    if digest != data[-_DIGEST_SIZE:]:
        raise CorruptSegment("segment digest (BLAKE2b) mismatch: its bytes were altered")
    body = data[info_size(data) : -_DIGEST_SIZE]
    return header, _decompress(body, header.columns_size)


def _check_prefix(data: bytes) -> None:
    if len(data) < PREFIX_SIZE:
        raise CorruptSegment(f"segment cut short: {len(data)} bytes, not even its prefix")
    if data[:4] != MAGIC:
        raise CorruptSegment(f"not a history segment: magic {data[:4]!r}, not {MAGIC!r}")


def _read_header(data: bytes) -> Header:
    end = info_size(data)
    if len(data) < end:
        raise CorruptSegment(f"segment cut short: {len(data)} bytes, its header ends at {end}")
    stored = int.from_bytes(data[end - _CRC_SIZE : end], "little")
    if zlib.crc32(data[: end - _CRC_SIZE]) != stored:
        raise CorruptSegment("header checksum (CRC32) mismatch: the header was altered")
    if data[4] != VERSION:
        raise UnsupportedSegmentVersion(data[4], VERSION)
    try:
        header = _header_decoder.decode(data[PREFIX_SIZE : end - _CRC_SIZE])
    except msgspec.DecodeError as exc:  # only from a bug: the CRC held
        raise CorruptSegment(f"header unreadable: {exc}") from None
    if not 0 <= header.body_size <= _MAX_BODY or not 0 <= header.columns_size <= _MAX_BODY:
        raise CorruptSegment("header gives impossible body sizes")
    return header


def _decompress(body: bytes, size: int) -> bytes:
    try:
        if zstandard.frame_content_size(body) != size:
            raise CorruptSegment("body's zstd frame does not hold the size the header gives")
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise CorruptSegment(f"body does not decompress (zstd): {exc}") from None
