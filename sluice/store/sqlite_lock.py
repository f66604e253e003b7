"""The process's write lock on a SQLite file, shared by every store it opens on the file."""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

# One write lock per database file and event loop, shared by every store of the process
# on that file (``sluice up`` opens one for the API, one for the workers, one for the
# relay...). SQLite's own lock is per file, and a BEGIN that finds it taken polls for
# it (the busy handler, every 100 ms at most): one store's back-to-back transactions
# (an import's batches) left another's BEGIN waiting 5 s and more, then SQLITE_BUSY (a
# 503), while that store's lock held back every other write of the API. Waiting here
# instead is first come, first served, and a writer waits for at most the one
# transaction ahead of it.
WRITE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def write_lock(path: Path) -> asyncio.Lock:
    """The lock every store of this event loop on ``path`` writes under."""
    locks = WRITE_LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(str(path.resolve()), asyncio.Lock())
