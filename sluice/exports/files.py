"""The CSV of one job: written to a part file, renamed into place when complete.

Every append is fsynced before the runner stores its checkpoint, so a
checkpoint never counts bytes the file might lose. A resumed job truncates the
part file to the checkpoint's length, which drops whatever a killed runner
wrote after its last checkpoint. All file work runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

from sluice.config import Config

PART_SUFFIX = ".csv.part"
RESULT_SUFFIX = ".csv"


def exports_dir(config: Config) -> Path:
    return Path(config.data_dir) / "exports"


def result_name(job_id: str) -> str:
    return f"{job_id}{RESULT_SUFFIX}"


class PartFile:
    """``<dir>/<job id>.csv.part`` while the job runs, ``<dir>/<job id>.csv`` after."""

    def __init__(self, directory: Path, job_id: str) -> None:
        self.directory = directory
        self.part = directory / f"{job_id}{PART_SUFFIX}"
        self.final = directory / result_name(job_id)
        self.size = 0
        self._file: BinaryIO | None = None

    async def open(self, size: int, header: bytes) -> bool:
        """Get ready to append at byte ``size`` (0: a new file starting with ``header``).

        False when the file cannot continue from there (missing, or shorter than
        the checkpoint says): the job has to start over.
        """
        return await asyncio.to_thread(self._open, size, header)

    def _open(self, size: int, header: bytes) -> bool:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.part.exists() and self.final.exists():
            # Killed between the rename and recording success: finish it again.
            os.replace(self.final, self.part)
        if size > 0 and (not self.part.exists() or self.part.stat().st_size < size):
            return False
        self._file = open(self.part, "r+b" if self.part.exists() else "w+b")  # noqa: SIM115
        self._file.truncate(size)
        self._file.seek(size)
        self.size = size
        if size == 0:
            self._write(header)
        return True

    async def append(self, data: bytes) -> int:
        """Append and fsync; the new length."""
        if data:
            await asyncio.to_thread(self._write, data)
        return self.size

    def _write(self, data: bytes) -> None:
        assert self._file is not None, "open() first"
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.size += len(data)

    async def complete(self) -> None:
        """Close and rename into place (the rename is made durable too)."""
        await asyncio.to_thread(self._complete)

    def _complete(self) -> None:
        self._close()
        os.replace(self.part, self.final)
        _fsync_dir(self.directory)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_results(directory: Path, job_id: str) -> None:
    """Delete a job's result and any part file left behind (missing files are fine)."""
    for name in (result_name(job_id), f"{job_id}{PART_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
