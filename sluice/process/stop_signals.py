"""SIGTERM and SIGINT as a graceful stop for the long-running process kinds.

The event loop takes both signals over once the process runs (``stop_on_signals``),
but a process spends its first few hundred milliseconds importing and opening
its connections, and a SIGTERM then (a supervisor stopping a replica it has just
restarted) used to end it at once, by the signal's default action. ``catch_early``,
called first thing in ``main``, notes such a signal instead, and the process stops
as soon as it runs: cleanly, as for a later signal.
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_asked_early = False


def _note(signum: int, frame: FrameType | None) -> None:
    global _asked_early
    _asked_early = True


def catch_early() -> None:
    """Note SIGTERM and SIGINT until ``stop_on_signals`` takes them over."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _note)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT, already set when one came before this call."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    if _asked_early:  # read after the handlers are in place: no signal falls between
        stop.set()
    return stop
