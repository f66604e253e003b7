"""What a visit records about its User-Agent, in one cached lookup per redirect.

A visit carries the browser family and whether it is a bot (``visits.classify``)
and the device and OS (``targeting.platform``, the mapping redirect rules use,
so a visit's ``os`` is the one a rule on ``os`` would have matched). Each of
those is cached on its own; the redirect asks this module instead, so a known
User-Agent costs one dictionary lookup, not two, on the hottest path.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from sluice.builtin.links import geo, visits
from sluice.builtin.links.agent_patterns import PREFIX
from sluice.builtin.links.targeting import platform
from sluice.builtin.links.visits import classify


class Agent(NamedTuple):
    browser: str
    is_bot: bool
    device: str | None  # mobile, tablet, desktop
    os: str | None  # android, ios, windows, macos, linux


def describe(user_agent: str) -> Agent:
    """The browser family, bot flag, device and OS of a User-Agent ("" for none), from
    its first ``PREFIX`` characters: agents alike in those share one cache entry."""
    return _describe(user_agent[:PREFIX])  # a header of PREFIX or less: no copy


@functools.lru_cache(maxsize=4096)
def _describe(user_agent: str) -> Agent:
    # The wrapped functions: their own caches would only hold a second copy.
    browser, is_bot = classify.__wrapped__(user_agent)
    device, system = platform.__wrapped__(user_agent)
    return Agent(browser, is_bot, device, system)


cache_info = _describe.cache_info  # describe's cache: hits, misses, size


def warm_up() -> None:
    """Compile the User-Agent patterns and load the country table now (~0.5 s), not on
    the first visit."""
    visits.warm_up()
    platform.__wrapped__("warm-up")
    geo.warm_up()
