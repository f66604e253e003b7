"""What a group's ``flow=`` declares (``Flow``, ``Rate``), and the deployment's word
on it (``SLUICE_<GROUP>_KEY_CONCURRENCY``, ``_KEY_RATE``, ``_RATE``).

Kept apart from the Redis side (``sluice.flow.limiter``): declaring a flow opens
nothing, and a worker checks the overrides before its first read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluice.config import Config

# What names an event's key: a field of the event, or a function of it (None: no key).
KeyOf = str | Callable[[Any], str | None]

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}
_RATE = re.compile(r"(\d+)\s*/\s*(\d*)\s*([a-z]+)")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` per ``per_seconds`` (``Rate(50)``: 50 a second), kept by a token
    bucket refilled evenly with a burst of ``burst`` (default a tenth of ``count``, at
    least 1): over a long window the count stays within a few percent of the rate."""

    count: int
    per_seconds: float = 1.0
    burst: int | None = None

    def __post_init__(self) -> None:
        if self.count < 1 or not self.per_seconds > 0:
            raise ValueError(f"{self!r}: count 1 or more, per_seconds more than 0")
        if self.burst is not None and self.burst < 1:
            raise ValueError(f"{self!r}: burst 1 or more")

    @property
    def bucket(self) -> int:
        """The tokens the bucket holds at most."""
        return self.burst if self.burst is not None else max(1, self.count // 10)

    @classmethod
    def parse(cls, text: str) -> Rate | None:
        """``"50/s"``, ``"600/min"``, ``"10/5s"``, ``"1000/h"``; ``"0"``: no limit (None)."""
        text = text.strip().lower()
        if text == "0":
            return None
        match = _RATE.fullmatch(text)
        if match is None or match[3] not in _UNITS:
            raise ValueError(text)
        return cls(int(match[1]), int(match[2] or 1) * _UNITS[match[3]])


@dataclass(frozen=True)
class Flow:
    """A group's flow control by a key of each event (``key``: a field name, or
    ``key(event) -> str | None``; an event without one is not limited):
    ``concurrency`` entries of one key in handling at once across every worker,
    ``rate`` per key, ``total_rate`` for the group overall; keys with waiting
    entries take turns."""

    key: KeyOf
    concurrency: int | None = None
    rate: Rate | None = None
    total_rate: Rate | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.key, str) or callable(self.key)):
            raise TypeError(f"Flow key must be a field name or a function, not {self.key!r}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"Flow concurrency must be 1 or more, not {self.concurrency}")
        for rate in (self.rate, self.total_rate):
            if rate is not None and not isinstance(rate, Rate):
                raise TypeError(f"Flow rates are Rate values, not {rate!r}")

    def key_of(self) -> Callable[[Any], str | None]:
        """The function from an event to its key (None: not limited)."""
        key = self.key
        if callable(key):
            return key
        name = key

        def field(event: Any) -> str | None:
            value = getattr(event, name, None)
            return None if value is None else str(value)

        return field


# The deployment's words on a flow group's limits: SLUICE_<GROUP>_<SUFFIX>.
FLOW_SUFFIXES = ("key_concurrency", "key_rate", "rate")


def variable(group: str, suffix: str) -> str:
    """``SLUICE_<GROUP>_<SUFFIX>`` of a group (``web-hooks``: ``SLUICE_WEB_HOOKS_...``)."""
    return f"SLUICE_{group.upper().replace('-', '_')}_{suffix}"


def with_overrides(group: str, flow: Flow, config: Config) -> Flow:
    """``flow`` with the deployment's ``SLUICE_<GROUP>_KEY_CONCURRENCY``, ``_KEY_RATE``
    and ``_RATE``; a malformed one is a ``ConfigError`` naming the variable and the group."""
    changes: dict[str, Any] = {}
    for suffix, field, given in (
        ("KEY_CONCURRENCY", "concurrency", config.group_key_concurrency),
        ("KEY_RATE", "rate", config.group_key_rates),
        ("RATE", "total_rate", config.group_rates),
    ):
        raw = given.get(group)
        if raw is None:
            continue
        try:
            changes[field] = _concurrency(raw) if field == "concurrency" else Rate.parse(raw)
        except ValueError:
            expected = (
                "a whole number, 0 for no limit"
                if field == "concurrency"
                else 'a rate such as "50/s", "600/min" or "0" for no limit'
            )
            raise ConfigError(
                f"{variable(group, suffix)} (flow control of group {group!r}) must be"
                f" {expected}, got {raw!r}"
            ) from None
    return replace(flow, **changes) if changes else flow


def _concurrency(raw: str) -> int | None:
    value = int(raw.strip())
    if value < 0:
        raise ValueError(raw)
    return value or None
