"""Bodies larger than the JSON limit (``MAX_BODY``, 64 KiB): a route that takes one
declares it on its ``Route`` as a ``LargeBody``, its size from the configuration and its
``admit``, the check of the caller's credentials, permissions and per-user limits.

Why a declaration and not a check in each view: the request middleware reads every
body before the view runs (so that 413 holds on every route), so a view that checked
its token first would already have taken 10 MiB from anyone who asked (30 such
sockets once took an API from 210 to 509 MB). Here the size and the admission come
together: the middleware lets a body past ``MAX_BODY`` only on a route that declares
one, and reads it only after that route's ``admit`` passed. A refused upload is answered
(401, 403, 429...) as soon as its head is in, and its connection closed with the body
unread, not drained. A future large-body route cannot forget its check: without an
``admit`` it cannot declare the size. See docs/guides/security.md, "Uploads".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from sluice.config import Config

if TYPE_CHECKING:
    from sluice.http.route_docs import Route


@dataclass(frozen=True)
class LargeBody:
    """A body of up to ``limit(config)`` bytes, read only once ``admit(request)`` returned;
    ``admit`` raises a ``ProblemError`` (``Unauthorized``, ``TooManyRequests``...) to
    refuse the upload with its body unread. It may read the request's headers, the
    store and Redis, never the body."""

    limit: Callable[[Config], int]
    admit: Callable[[web.Request], Awaitable[None]]


# (method, route pattern) -> what the route declared.
LargeBodies = dict[tuple[str, str], LargeBody]


def declared(routes: Sequence[Route]) -> LargeBodies:
    """The large bodies ``routes`` declare, for the middleware's look-up."""
    return {(r.method, r.path): r.large_body for r in routes if r.large_body is not None}


def large_body(request: web.Request, bodies: LargeBodies) -> LargeBody | None:
    """What the matched route declared, or None: the body is held to ``MAX_BODY``."""
    resource = request.match_info.route.resource
    if resource is None or not bodies:
        return None
    return bodies.get((request.method, resource.canonical))
