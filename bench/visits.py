"""Visits as the API's visit writer commits them, for the benchmarks that fill a history
(``trace_ids.py``, ``redirect.py --history``). Imports nothing newer than release 1 of
sluice, so a before/after can put an older checkout on ``PYTHONPATH``."""

from __future__ import annotations

import random
from collections.abc import Callable

from sluice.builtin.links.events import LinkVisited

_random = random.Random(1)


def random_trace_id() -> str:
    """What ``new_trace_id`` drew before it was time-ordered: 128 random bits."""
    return f"{_random.getrandbits(128):032x}"


class Visits:
    """Batches of visits to 1,000 links (codes ``{prefix}0000``...) from 5,000 visitors,
    each visit with a trace id of its own from ``trace_id``."""

    def __init__(self, prefix: str, trace_id: Callable[[], str], seed: int = 7) -> None:
        self._prefix, self._trace_id = prefix, trace_id
        self._rng = random.Random(seed)
        self._visitors = [f"{self._rng.getrandbits(256):064x}" for _ in range(5_000)]

    def batch(self, n: int) -> list[LinkVisited]:
        rng = self._rng
        return [
            LinkVisited(
                code=f"{self._prefix}{rng.randrange(1000):04d}",
                visitor=rng.choice(self._visitors),
                browser="Chrome",
                trace_id=self._trace_id(),
            )
            for _ in range(n)
        ]
