"""The event history at scale: archive segments of published events.

Events that every consumer has long read move from the hot ``events`` table
into segments: one compact, compressed, checked block per aggregate and seq
range, each with a header an index reads without opening the block.
``segment`` encodes and decodes them; nothing here touches a store yet.
"""

from __future__ import annotations

from sluice.history.errors import CorruptSegment, SegmentError, UnsupportedSegmentVersion
from sluice.history.frame import SegmentInfo
from sluice.history.segment import EventRow, decode, encode, read_info

__all__ = [
    "CorruptSegment",
    "EventRow",
    "SegmentError",
    "SegmentInfo",
    "UnsupportedSegmentVersion",
    "decode",
    "encode",
    "read_info",
]
