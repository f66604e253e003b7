"""The redirect path's in-process link cache; what keeps it current is in
``sluice.builtin.links.cache_updates``.

A redirect reads its link from this cache: no Redis round trip, no database
write, and a database read only on a miss. A committed change makes every API
replica forget the link, so its next redirect reads the new state:

- the process that committed it forgets it at once (read-your-writes);
- it then PUBLISHes the code (``ChangeHints``, never awaited by the request);
  every replica's ``ChangeListener`` forgets the code on receipt. This is the
  fast path: a round trip, however far the relay is behind (a backlog of
  visits ahead of the change in the outbox does not delay it);
- every replica's ``LinkFollower`` reads the links stream of every partition
  (plain ``XREAD``, no group) and forgets the code of each
  ``LinkCreated``/``LinkUpdated``: the durable path, which also covers a hint
  lost while Redis was away.

When one of the follower's readers or the listener (re)connects, changes may
have been missed while it was away, so it clears the cache. Positive entries also expire after
``max_age`` as a safety net for a change feed that is up but silent; unknown
codes are cached only briefly.

A miss reads the database. A forget or a clear that happens while that read is
in flight wins over the read's (possibly older) result: it unregisters the
read, which then fills nothing, and a request after it starts a read of its
own instead of joining the old one. While the database fails, a forgotten
link answers with the last state known (from the stream's event, else the
entry as it was): stale beats none.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import msgspec
import structlog
import yarl

from sluice.app.advanced import decode
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.builtin.links.rule_shapes import Rule
from sluice.builtin.links.stored import Link

log = structlog.get_logger(__name__)


class Target(msgspec.Struct, frozen=True):
    """What a redirect needs to know about a link."""

    url: str
    expires_at: datetime | None
    disabled: bool
    status: int = 302  # the redirect's status: 301, 302, 307 or 308
    valid_since: datetime | None = None  # before it, the code answers as unknown (404)
    max_visits: int | None = None  # GET redirects counted across replicas (links.limits)
    rules: tuple[Rule, ...] = ()  # their urls as Location values, as ``url``
    # A password link answers its form, and redirects only after a POST of the password
    # (sluice/builtin/links/http/link_passwords.py). Only the flag: the hash is read when one is
    # posted.
    password: bool = False

    def gone(self, now: datetime) -> bool:
        """Disabled or expired: the redirect answers 410."""
        return self.disabled or (self.expires_at is not None and self.expires_at <= now)

    def hidden(self, now: datetime) -> bool:
        """Not valid yet: the redirect answers 404, as for an unknown code."""
        return self.valid_since is not None and now < self.valid_since

    def plain(self, now: datetime) -> bool:
        """Live, valid, unlimited and open: the cache alone answers (the fast path)."""
        return (
            self.max_visits is None
            and not self.password
            and not self.disabled
            and (self.expires_at is None or self.expires_at > now)
            and (self.valid_since is None or self.valid_since <= now)
        )


def location(url: str) -> str:
    """``url`` as a Location header value: percent-encoded when it is not plain ASCII."""
    if url.isascii() and url.isprintable() and " " not in url:
        return url
    return str(yarl.URL(url))


def target_of(link: Link | LinkCreated | LinkUpdated) -> Target:
    rules = tuple(msgspec.structs.replace(rule, url=location(rule.url)) for rule in link.rules)
    return Target(
        location(link.url),
        link.expires_at,
        link.disabled,
        link.redirect_status,
        link.valid_since,
        link.max_visits,
        rules,
        link.has_password,
    )


Loader = Callable[[str], Awaitable[Target | None]]
# (target or None for an unknown code, fresh until (monotonic seconds), whether the
# target may answer once stale: not for a forgotten code whose state is not known)
_Entry = tuple[Target | None, float, bool]
_STALE = float("-inf")
_KEEP: Any = object()


class LinkCache:
    """A bounded LRU of codes to ``Target`` (or None: unknown), filled by ``load`` on a miss."""

    def __init__(
        self,
        load: Loader,
        *,
        max_size: int = 100_000,
        max_age: float = 60.0,
        unknown_ttl: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._max_size = max_size
        self._max_age = max_age
        self._unknown_ttl = unknown_ttl
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # The read in flight for each code that may still fill it: a forget or a clear
        # unregisters it, so its result is neither stored nor joined by a later request.
        self._loading: dict[str, asyncio.Task[Target | None]] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, code: str) -> Target | None:
        """The cached answer for ``code`` while fresh (None: unknown); KeyError otherwise.

        The redirect's fast path: no coroutine when the link is in the cache.
        """
        entry = self._entries[code]
        if self._clock() >= entry[1]:
            raise KeyError(code)
        self._entries.move_to_end(code)
        self.hits += 1
        return entry[0]

    async def get(self, code: str) -> Target | None:
        """The link's target, None for an unknown code; reads the database on a miss."""
        entry = self._entries.get(code)
        if entry is not None and self._clock() < entry[1]:
            self._entries.move_to_end(code)
            self.hits += 1
            return entry[0]
        try:
            return await self._coalesced_read(code)
        except Exception:
            entry = self._entries.get(code, entry)
            if entry is not None and entry[2]:  # the database failed: stale beats none
                log.warning("link read failed, serving the cached state", code=code)
                return entry[0]
            raise

    def forget(self, code: str, last_known: Target | None = _KEEP) -> None:
        """A change was committed: the next request for ``code`` reads the database, and no
        read in flight that began before this stores its result or is joined. While the
        database fails, ``last_known`` answers (by default the entry as it was, if it was
        a link: an unknown code may be the link just created)."""
        self._loading.pop(code, None)
        if last_known is _KEEP:
            entry = self._entries.get(code)
            last_known = entry[0] if entry is not None else None
        self._put(code, (last_known, _STALE, last_known is not None))

    def clear(self) -> None:
        """Forget everything, including what reads in flight will return."""
        self._loading.clear()
        self._entries.clear()

    def _store(self, code: str, target: Target | None) -> None:
        ttl = self._max_age if target is not None else self._unknown_ttl
        self._put(code, (target, self._clock() + ttl, True))

    def _put(self, code: str, entry: _Entry) -> None:
        self._entries[code] = entry
        self._entries.move_to_end(code)
        while len(self._entries) > self._max_size:
            self._entries.popitem(last=False)

    async def _coalesced_read(self, code: str) -> Target | None:
        # One database read per code at a time, however many requests miss together.
        pending = self._loading.get(code)
        if pending is None:
            pending = self._loading[code] = asyncio.ensure_future(self._read(code))

            def done(task: asyncio.Future[Target | None]) -> None:
                if self._loading.get(code) is task:
                    del self._loading[code]

            pending.add_done_callback(done)
        # A request that goes away must not cancel the read the others wait for.
        return await asyncio.shield(pending)

    async def _read(self, code: str) -> Target | None:
        self.misses += 1
        target = await self._load(code)
        if self._loading.get(code) is asyncio.current_task():  # not forgotten meanwhile
            self._store(code, target)
        return target


def apply_entry(cache: LinkCache, fields: dict[bytes, bytes]) -> None:
    """Forget the link a links-stream entry changed, keeping the state it carries for when
    the database fails; skip anything else."""
    data = fields.get(b"data")
    if data is None:
        return
    try:
        event = decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("undecodable entry on the links stream, skipped", error=str(exc))
        return
    if isinstance(event, LinkCreated | LinkUpdated):
        cache.forget(event.code, target_of(event))
