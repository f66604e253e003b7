"""``GET /{code}`` and ``HEAD /{code}``: the redirect, answered from the in-process link cache.

A redirect makes no Redis round trip and no database write: the link comes
from the cache (a database read only on a miss), and a GET hands its visit to
the group-commit writer, which commits buffered visits every few milliseconds.
HEAD answers the same status and headers and records nothing. The one exception
is a link with ``max_visits``: one Redis script call counts its visit across
replicas (sluice/builtin/links/limits.py). A GET of a code no link has is counted as an orphan
visit in process (sluice/builtin/links/orphans.py), written in batches: a 404 stays as cheap.

A link with ``rules`` picks its target per request (``destination``), in process:
the facts its rules look at come from the request's headers and address alone.
"""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
from collections.abc import AsyncIterator
from datetime import datetime

import structlog
from aiohttp import hdrs, web

from sluice.app import (
    ConfigError,
    DependencyDown,
    Route,
    config,
    html_page,
    problem,
    redis,
    store,
    trace_id,
    utcnow,
)
from sluice.app.advanced import (
    APPS,
    KEYS,
    NO_STORE,
    QUIET,
    VISITOR_KEY,
    Caller,
    Network,
    VisitorHasher,
    cancel_and_wait,
    client_host,
    client_ip,
    password_page,
    problem_response,
    redis_client,
    tracing,
    trusted_networks,
)
from sluice.builtin.links import geo
from sluice.builtin.links.agents import describe, warm_up
from sluice.builtin.links.cache import LinkCache, Target, target_of
from sluice.builtin.links.cache_updates import ChangeHints, ChangeListener, LinkFollower
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.http.keys import (
    LINK_CACHE,
    LINK_FOLLOWER,
    LINK_HINTS,
    ORPHANS,
    VISIT_LIMITER,
    VISITS,
)
from sluice.builtin.links.keys import LinksKeys
from sluice.builtin.links.limits import LimitUnknown, VisitLimiter
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stored import get_link
from sluice.builtin.links.targeting import Facts, choose
from sluice.builtin.links.visits import VisitRecorder, referrer_host

log = structlog.get_logger(__name__)

# Generated codes and aliases both fit this; anything else is unknown without a lookup.
CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,63}")
# On 404 and 410 too: a link can be created, re-enabled or extended later.
FOLLOW_BLOCK_MS = 5_000
# SLUICE_TRUSTED_PROXIES, parsed once: whose forwarded headers name the client for rules.
TRUSTED_PROXIES: web.AppKey[tuple[Network, ...]] = web.AppKey("trusted_proxies")


async def redirect(request: web.Request) -> web.StreamResponse:
    """A redirect (302, or the link's redirect_status) to the link's URL; 404 unknown or not
    valid yet, 410 disabled, expired or out of visits. Only GET records (and counts) a visit."""
    now = utcnow()
    code = request.match_info["code"]
    try:
        target = request.app[LINK_CACHE].cached(code)  # no coroutine on a hit
    except KeyError:
        target = await _target(request, code) if CODE.fullmatch(code) else None
    if target is None or target.hidden(now):
        if target is None and request.method == "GET" and CODE.fullmatch(code):
            request.app[ORPHANS].count(code, now)  # an orphan visit: a few dict operations
        return _problem(404, f"no short link at {request.path}")
    if target.gone(now):
        return _problem(410, f"the short link {code} is disabled or expired")
    get = request.method == "GET"
    count = get and not target.password  # a password link counts the POST that unlocks it
    if target.max_visits is not None and not await _visit_left(request, code, target, count):
        return _problem(410, f"the short link {code} has served all its visits")
    if target.password:  # its form, to GET and HEAD alike, no visit (http/link_passwords.py)
        return password_page()
    if get:
        record_visit(request, code, target, now)
    url = destination(request, target, request.app[TRUSTED_PROXIES])
    return web.Response(status=target.status, headers={"Location": url, "Cache-Control": NO_STORE})


def record_visit(request: web.Request, code: str, target: Target, now: datetime) -> None:
    """Hand the visit of a served redirect to the group commit: a GET's, or the POST that
    unlocked a password link (sluice/builtin/links/http/link_passwords.py)."""
    key = request.app[VISITOR_KEY]
    visit = visit_of(request, key, code, now, trace_id(request), request.app[TRUSTED_PROXIES])
    # With tracing on, the redirect's span: the writer stores the visit under it, so the
    # visit's handlers are in the redirect's trace (docs/guides/tracing.md).
    parent = tracing.current_traceparent() if tracing.ENABLED else None
    request.app[VISITS].record(visit, counted=target.max_visits is not None, traceparent=parent)
    request[QUIET] = config(request).redirect_log == "errors"


def destination(request: Caller, target: Target, trusted: tuple[Network, ...]) -> str:
    """Where this request goes: the first of the link's rules that matches, else its url.
    Each fact is read from the request only when a rule gets to it."""
    if not target.rules:
        return target.url
    headers = request.headers
    facts = Facts(
        headers.get(hdrs.USER_AGENT),
        headers.get(hdrs.ACCEPT_LANGUAGE),
        functools.partial(client_ip, request, trusted),
    )
    return choose(target.rules, facts) or target.url


async def _visit_left(request: web.Request, code: str, target: Target, get: bool) -> bool:
    assert target.max_visits is not None
    try:
        return await request.app[VISIT_LIMITER].take(code, target.max_visits, count=get)
    except LimitUnknown as exc:
        log.warning("visit limit not checked", code=code, error=str(exc))
        raise DependencyDown("Redis is unavailable; this link's visits cannot be counted") from None


async def _target(request: web.Request, code: str) -> Target | None:
    try:
        return await request.app[LINK_CACHE].get(code)
    except Exception as exc:  # whatever the store raises: nothing cached, nothing to answer
        log.exception("link lookup failed")
        raise DependencyDown("the database is unavailable; the link cannot be looked up") from exc


def _problem(status: int, detail: str) -> web.Response:
    return problem_response(status, detail, headers={"Cache-Control": NO_STORE})


@functools.lru_cache(maxsize=4)
def _hasher(key: bytes) -> VisitorHasher:
    return VisitorHasher(key)


# Country of a client address, cached: a visitor's next redirects cost a dict lookup.
_country = functools.lru_cache(maxsize=4096)(geo.country_of)


def visit_of(
    request: Caller,
    key: bytes,
    code: str,
    now: datetime,
    trace_id: str,
    trusted: tuple[Network, ...],
) -> LinkVisited:
    """The visit a GET redirect records; ``key``: the visitor key (``VISITOR_KEY``);
    ``trusted``: the proxies whose forwarded headers name the client (``TRUSTED_PROXIES``):
    the visitor hash and the country are the client's, never the proxy's."""
    headers = request.headers
    user_agent = headers.get(hdrs.USER_AGENT, "")
    agent = describe(user_agent)
    client = client_host(request, trusted)
    return LinkVisited(
        code=code,
        visitor=_hasher(key)(client, user_agent),
        referrer_host=referrer_host(headers.get(hdrs.REFERER)),
        browser=agent.browser,
        is_bot=agent.is_bot,
        country=_country(client) if client else None,
        os=agent.os,
        device=agent.device,
        occurred_at=now,
        trace_id=trace_id,
    )


async def follow_links(app: web.Application) -> AsyncIterator[None]:
    """The link cache, the tasks that keep it current (the links stream's follower and the
    change hints' listener), and the hints this process sends after its commits."""
    db = store(app)

    async def load(code: str) -> Target | None:
        link = await get_link(db, code)
        return None if link is None else target_of(link)

    cache = LinkCache(load)
    app[LINK_CACHE] = cache
    app[TRUSTED_PROXIES] = trusted_networks(config(app).trusted_proxies)
    app[VISIT_LIMITER] = VisitLimiter(redis(app), app[KEYS], db)
    channel = LinksKeys(app[KEYS].prefix).links_changed_channel()
    origin = secrets.token_hex(8)  # this process, in its hints
    app[LINK_HINTS] = hints = ChangeHints(redis(app), channel, origin)
    # Connections of their own: a blocking XREAD or a subscription must not hold one
    # the requests need.
    reader = redis_client(config(app), socket_timeout=FOLLOW_BLOCK_MS / 1000 + 5, retry=False)
    streams = [app[KEYS].stream("links", partition) for partition in app[KEYS].numbers]
    follower = LinkFollower(reader, streams, cache, block_ms=FOLLOW_BLOCK_MS)
    app[LINK_FOLLOWER] = follower
    listener = ChangeListener(reader, channel, cache, origin)
    tasks = [
        asyncio.create_task(follower.run(), name="link-follower"),
        asyncio.create_task(listener.run(), name="link-change-listener"),
    ]
    try:
        yield
    finally:
        for task in tasks:
            await cancel_and_wait(task)
        await hints.close()
        await reader.aclose()


def link_changed(app: web.Application, code: str) -> None:
    """After a commit that created or changed ``code``: this process reads it again at
    once, and every replica does when the hint reaches it."""
    app[LINK_CACHE].forget(code)
    app[LINK_HINTS].publish(code)


async def record_visits(app: web.Application) -> AsyncIterator[None]:
    """The group-commit visit writer; on shutdown it commits what is still buffered."""
    await asyncio.to_thread(warm_up)
    settings = LinksSettings.of(app)
    recorder = VisitRecorder(
        store(app),
        interval=settings.visit_flush_ms / 1000,
        batch=settings.visit_batch,
        max_buffer=settings.visit_buffer,
    )
    app[VISITS] = recorder
    recorder.start()
    try:
        yield
    finally:
        await recorder.close()


_CODE_IN_PATH = {
    "name": "code",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$"},
}
_REDIRECT = {
    "description": "to the link's URL, or the url of its first matching rule",
    "headers": {
        "Location": {"schema": {"type": "string", "format": "uri"}},
        "Cache-Control": {"schema": {"const": NO_STORE}},
    },
}
_RESPONSES = {
    "200": {
        **html_page(
            "the link has a password: a form that posts it to `POST /{code}` (no visit is "
            "recorded or counted; no script, no asset from elsewhere)"
        ),
        "headers": {"Cache-Control": {"schema": {"const": "no-store"}}},
    },
    "301": {**_REDIRECT, "description": "to the link's URL (its redirect_status is 301)"},
    "302": {**_REDIRECT, "description": "to the link's URL (the default redirect_status)"},
    "307": {**_REDIRECT, "description": "to the link's URL (its redirect_status is 307)"},
    "308": {**_REDIRECT, "description": "to the link's URL (its redirect_status is 308)"},
    "404": problem("no link has this code, or its valid_since is still ahead"),
    "410": problem("the link is disabled or expired, or has served its max_visits"),
    "503": problem(
        "the link is not cached and the database is unavailable, or the link has "
        "max_visits and Redis, which counts them, is unavailable"
    ),
}

# HEAD is a route of its own here: it records no visit, unlike the GET it mirrors.


async def no_link_under_a_route(app: web.Application) -> AsyncIterator[None]:
    """Refuse to serve while a link's code is the whole path of an app's route
    (``GET /launchpad``): the router would answer the route and the link would be gone
    without a word. New aliases cannot take such a word (``Apps.reserved_words``); a link
    made before the route came is named here, and the route has to move (under /v1/)."""
    paths = {r.path[1:]: r for r in app[APPS].routes if r.path.count("/") == 1}
    paths = {code: r for code, r in paths.items() if CODE.fullmatch(code)}
    if paths:
        marks = ", ".join("?" for _ in paths)
        rows = await store(app).fetchall(
            f"SELECT code FROM links WHERE code IN ({marks})", [*paths]
        )
        if rows:
            code = str(rows[0][0])
            route = paths[code]
            owner = next(a.name for a in app[APPS].apps if route in a.routes)
            raise ConfigError(
                f"the short link {code!r} would be shadowed by route {route.method}"
                f" {route.path} of app {owner!r}: serve the route under /v1/ (links are"
                " never deleted, and its owner's short URL must keep working)"
            )
    yield


ROUTES = (
    Route(
        "GET",
        "/{code}",
        redirect,
        {
            "operationId": "redirect",
            "summary": "Follow a short link: a redirect to its URL, recording a visit",
            "description": "The target is the `url` of the link's first `rule` whose conditions"
            " all hold (device and os from `User-Agent`, language from `Accept-Language`,"
            " country from the client address), else the link's `url`. Every answer carries"
            " `Cache-Control: private, no-store` and"
            " `X-Trace-Id`, the trace id its visit is recorded with. A redirect that records"
            " a visit writes no request log line unless `SLUICE_REDIRECT_LOG=all`; 404, 410"
            " and 5xx answers are logged.",
            "parameters": [_CODE_IN_PATH],
            "responses": _RESPONSES,
        },
    ),
    Route(
        "HEAD",
        "/{code}",
        redirect,
        {
            "operationId": "redirect_head",
            "summary": "The redirect's status and headers, without a body; records no visit",
            "parameters": [_CODE_IN_PATH],
            "responses": _RESPONSES,
        },
    ),
)
