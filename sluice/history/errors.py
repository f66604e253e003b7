"""What reading an archive segment can fail with.

A segment is either read back exactly as it was written or refused: callers
never get rows from a segment whose bytes changed, and can tell a damaged
segment (quarantine it, restore it from a copy) from one written by a newer
sluice (upgrade the reader).
"""

from __future__ import annotations

from sluice.errors import SluiceError


class SegmentError(SluiceError):
    """Base of the errors a segment reader raises."""


class CorruptSegment(SegmentError):
    """The segment's bytes are not what was written: the message names the check that failed."""


class UnsupportedSegmentVersion(SegmentError):
    """An intact segment in a format version this code does not read (written by a newer one)."""

    def __init__(self, version: int, supported: int) -> None:
        super().__init__(
            f"segment format version {version} is not supported: this sluice reads version"
            f" {supported} (a newer sluice wrote it?)"
        )
        self.version = version
        self.supported = supported
