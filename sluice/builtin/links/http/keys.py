"""The links app's aiohttp state, behind typed keys."""

from __future__ import annotations

from aiohttp import web

from sluice.builtin.links.cache import LinkCache
from sluice.builtin.links.cache_updates import ChangeHints, LinkFollower
from sluice.builtin.links.limits import VisitLimiter
from sluice.builtin.links.orphans import OrphanTally
from sluice.builtin.links.visits import VisitRecorder

# The redirect path: links cached in process, the stream follower, the change hints
# this process sends after its commits, the visit writer.
LINK_CACHE = web.AppKey("link_cache", LinkCache)
LINK_FOLLOWER = web.AppKey("link_follower", LinkFollower)
LINK_HINTS = web.AppKey("link_hints", ChangeHints)
VISITS = web.AppKey("visits", VisitRecorder)
# GETs of unknown codes, counted in process and written in batches (docs/guides/links.md).
ORPHANS = web.AppKey("orphans", OrphanTally)
# The Redis gate of links with max_visits.
VISIT_LIMITER = web.AppKey("visit_limiter", VisitLimiter)
