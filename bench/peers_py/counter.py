"""Counting finished jobs at no measurable cost: one 24-byte mmap file per process.

A job calls ``done()`` (a batch of k: ``done(k)``): the process's count, the
wall time of its last job and of its first are written into
``$BENCH_COUNTS/<pid>`` (little-endian u64, f64, f64), a memory write, no
system call. ``bench/peers.py`` sums the files.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from pathlib import Path

_lock = threading.Lock()
_state: dict[str, object] = {}


def _slot() -> mmap.mmap:
    pid = os.getpid()
    if _state.get("pid") != pid:  # first job, or first in a forked child
        path = Path(os.environ["BENCH_COUNTS"]) / str(pid)
        with path.open("w+b") as f:
            f.truncate(24)
            _state.update(pid=pid, n=0, mm=mmap.mmap(f.fileno(), 24), first=time.time())
    slot = _state["mm"]
    assert isinstance(slot, mmap.mmap)
    return slot


def done(jobs: int = 1) -> None:
    with _lock:
        slot = _slot()
        n = int(_state["n"]) + jobs  # type: ignore[call-overload]
        _state["n"] = n
        struct.pack_into("<Qdd", slot, 0, n, time.time(), _state["first"])
