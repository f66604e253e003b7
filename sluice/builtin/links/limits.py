"""``max_visits``, exact across every API replica: a Redis counter per limited link.

A GET of a link with ``max_visits`` runs one script on the link's counter: below
the limit it adds one and the redirect is served, at the limit it refuses (410)
and adds nothing, so a refused request never counts. The limit travels in the
request (from the cached link), so a PATCH takes effect as soon as the replica
knows of it (at once on the replica that committed it, within a hint's round
trip elsewhere). HEAD reads the counter without adding.

A counter that is missing (Redis lost its data, or its 7-day idle expiry passed)
starts again from the database: the larger of ``link_visit_counts`` (visits of
limited links, committed with the visits) and ``link_stats.total`` (every visit,
as the projection has counted them); the script sets it only if it is still
missing, so concurrent starts agree. Both are lower bounds of what was served:
only visits still in a process's group-commit buffer (the last few milliseconds)
can be missing from them.

While Redis is down a limited link answers 503. Counting in the database
instead would make two gates, one per replica that does or does not reach Redis
at that moment, and together they would serve more than the limit; a single
gate is what makes the limit exact. Links without ``max_visits`` never come here.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from sluice.app import SluiceError, Store, Tx
from sluice.app.advanced import REDIS_DOWN, Keys
from sluice.builtin.links.keys import LinksKeys

COUNTER_TTL_SECONDS = 7 * 24 * 3600
REDIS_TIMEOUT = 0.5
_EXHAUSTED_MAX = 100_000
_UNAVAILABLE = (*REDIS_DOWN, TimeoutError)

# KEYS[1] the link's counter; ARGV: max_visits, the count to start from when the counter
# is missing ('' when not read yet), '1' to take a visit or '0' to look, the TTL. Returns
# -1 (missing: read the database and call again), 0 (the limit is reached: refused,
# nothing counted) or 1 (a visit is left; taken when asked to).
_TAKE = """
local used = redis.call('GET', KEYS[1])
if not used then
    if ARGV[2] == '' then return -1 end
    used = ARGV[2]
    redis.call('SET', KEYS[1], used)
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
if tonumber(used) >= tonumber(ARGV[1]) then return 0 end
if ARGV[3] == '1' then redis.call('INCR', KEYS[1]) end
return 1
"""


class LimitUnknown(SluiceError):
    """Redis, which counts the visits of limited links, cannot be reached."""


class VisitLimiter:
    """The gate of links with ``max_visits`` (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys, store: Store) -> None:
        self._redis = redis
        self._keys = keys
        self._store = store
        self._script = redis.register_script(_TAKE)
        # Codes refused at a limit: a count only grows, so a link refused at max_visits
        # M stays refused at M (a PATCH to another limit asks Redis again).
        self._exhausted: dict[str, int] = {}

    async def take(self, code: str, max_visits: int, *, count: bool) -> bool:
        """Whether the redirect may be served; with ``count`` (a GET), one visit is taken.
        Raises ``LimitUnknown`` while Redis is unavailable."""
        if self._exhausted.get(code) == max_visits:
            return False
        key = LinksKeys(self._keys.prefix).link_visits(code)
        args: list[int | str] = [max_visits, "", "1" if count else "0", COUNTER_TTL_SECONDS]
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                answer = int(await self._script(keys=[key], args=args))
                if answer < 0:
                    args[1] = await served(self._store, code)
                    answer = int(await self._script(keys=[key], args=args))
        except _UNAVAILABLE as exc:
            raise LimitUnknown(f"visits of {code} cannot be counted: {exc!r}") from exc
        if answer == 0:
            if len(self._exhausted) >= _EXHAUSTED_MAX:
                self._exhausted.clear()
            self._exhausted[code] = max_visits
        return answer == 1

    async def restart(self, code: str) -> None:
        """Drop the counter, so the next request starts it from the database: for a link
        that gets a limit again (visits served without one were not counted in Redis).
        Raises ``LimitUnknown`` while Redis is unavailable."""
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self._redis.delete(LinksKeys(self._keys.prefix).link_visits(code))
        except _UNAVAILABLE as exc:
            raise LimitUnknown(f"the visit count of {code} cannot be reset: {exc!r}") from exc


async def served(store: Store | Tx, code: str) -> int:
    """GET redirects of ``code`` served as the database knows them (a lower bound: the
    visits still in group-commit buffers are missing)."""
    row = await store.fetchone(
        "SELECT (SELECT visits FROM link_visit_counts WHERE code = ?),"
        " (SELECT total FROM link_stats WHERE code = ?)",
        (code, code),
    )
    if row is None:
        return 0
    return max(int(row[0] or 0), int(row[1] or 0))
