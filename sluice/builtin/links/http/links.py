"""The caller's short links: create, list, read, change. Links are never deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import structlog
from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    Conflict,
    DependencyDown,
    FieldError,
    Forbidden,
    NotFound,
    Route,
    config,
    json_response,
    limit_query,
    ok,
    parse_limit,
    problem,
    read_json,
    request_body,
    require_user,
    store,
    too_many,
    trace_id,
    utcnow,
)
from sluice.app.advanced import APPS
from sluice.builtin.links import repository, rules
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.builtin.links.http.keys import VISIT_LIMITER
from sluice.builtin.links.http.link_checks import Checks, checked_changes, checked_fields, hashed
from sluice.builtin.links.http.redirects import link_changed
from sluice.builtin.links.http.schemas import CODE, NO_LINK, LinkBody, LinkOut, LinkPage, LinkPatch
from sluice.builtin.links.limits import LimitUnknown
from sluice.builtin.links.pool import PoolRefiller
from sluice.builtin.links.rules import check_alias, check_expiry, check_url, short_origin
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stored import Link, get_link

log = structlog.get_logger(__name__)

PAGE_MAX = 100
PAGE_DEFAULT = 20

# The process's background refill of the code pool.
POOL_REFILLER = web.AppKey("pool_refiller", PoolRefiller)


async def code_pool(app: web.Application) -> AsyncIterator[None]:
    """Own the low-mark refill task. Nothing is refilled at startup: the first link that
    finds the pool low starts a refill in the background."""
    refiller = PoolRefiller(store(app), LinksSettings.of(app).code_pool_target)
    app[POOL_REFILLER] = refiller
    try:
        yield
    finally:
        await refiller.close()


def _out(request: web.Request, link: Link) -> LinkOut:
    return LinkOut(
        code=link.code,
        short_url=f"{config(request).base_url}/{link.code}",
        url=link.url,
        expires_at=link.expires_at,
        disabled=link.disabled,
        created_at=link.created_at,
        max_visits=link.max_visits,
        valid_since=link.valid_since,
        redirect_status=link.redirect_status,
        tags=list(link.tags),
        title=link.title,
        rules=list(link.rules),
        has_password=link.has_password,
    )


async def create_link(request: web.Request) -> web.Response:
    """A new link under the alias given, else a code from the pool; ``LinkCreated`` with it."""
    user = await require_user(request)
    body = await read_json(request, LinkBody)
    now = utcnow()
    checks = Checks()
    own = short_origin(config(request).base_url)
    url = checks.run("url", check_url, body.url or "", own)
    routes = request.app[APPS].reserved_words
    alias = None if body.alias is None else checks.run("alias", check_alias, body.alias, routes)
    expires_at = None
    if body.expires_at is not None:
        expires_at = checks.run("expires_at", check_expiry, body.expires_at, now)
    fields = checked_fields(checks, body, own)
    if fields.get("redirect_status", 302) is None:  # null: the default
        del fields["redirect_status"]
    checks.done("invalid link")
    fields = await hashed(request, fields, user)
    draft = Link(
        code="",
        owner_id=user.id,
        url=url,
        expires_at=expires_at,
        disabled=False,
        created_at=now,
        **fields,
    )
    try:
        async with store(request).transaction() as tx:
            room = await repository.room_for_links(
                tx, user.id, LinksSettings.of(request).links_per_user
            )
            if room.full:
                raise Forbidden(room.refusal())
            link, pool_empty = await repository.create_link(tx, draft, alias=alias)
            await tx.append(repository.link_event(LinkCreated, link, trace_id(request)))
    except repository.AliasTaken:
        raise Conflict(f"the alias {body.alias!r} is taken") from None
    except repository.NoFreeCode as exc:
        log.error("no free short code", attempts=repository.CODE_ATTEMPTS)
        raise DependencyDown(f"{exc}; try again") from None
    link_changed(request.app, link.code)  # a replica may have cached the code as unknown
    if alias is None:
        request.app[POOL_REFILLER].poke(empty=pool_empty)
    return json_response(_out(request, link), 201, headers={"Location": f"/v1/links/{link.code}"})


def _page_query(request: web.Request) -> tuple[int, tuple[str, str] | None, str | None]:
    checks = Checks()
    limit = parse_limit(request.query.get("limit", str(PAGE_DEFAULT)), PAGE_MAX) or 0
    if not limit:
        checks.errors.append(FieldError("limit", f"must be an integer from 1 to {PAGE_MAX}"))
    cursor = request.query.get("cursor")
    after = None if cursor is None else checks.run("cursor", repository.decode_cursor, cursor)
    tag = request.query.get("tag")
    if tag is not None:
        tag = checks.run("tag", rules.check_tag, tag)
    checks.done("invalid query parameters")
    return limit, after, tag


async def list_links(request: web.Request) -> web.Response:
    """The caller's links, newest first, those with ``tag`` only when given; ``next_cursor``
    is null on the last page."""
    user = await require_user(request)
    limit, after, tag = _page_query(request)
    links = await repository.links_page(store(request), user.id, limit + 1, after, tag=tag)
    next_cursor = repository.encode_cursor(links[limit - 1]) if len(links) > limit else None
    items = [_out(request, link) for link in links[:limit]]
    return json_response(LinkPage(items=items, next_cursor=next_cursor))


def _not_found(code: str) -> NotFound:
    # The same answer for an unknown code and another user's link.
    return NotFound(f"you have no link {code!r}")


async def read_link(request: web.Request) -> web.Response:
    user = await require_user(request)
    code = request.match_info["code"]
    link = await get_link(store(request), code)
    if link is None or link.owner_id != user.id:
        raise _not_found(code)
    return json_response(_out(request, link))


async def patch_link(request: web.Request) -> web.Response:
    """Change any field but the code; absent fields keep their value, null clears
    ``expires_at``, ``max_visits``, ``valid_since``, ``tags``, ``title``, ``rules`` and
    ``password``.
    Every PATCH commits ``LinkUpdated`` with the link's full new state."""
    user = await require_user(request)
    code = request.match_info["code"]
    body = await read_json(request, LinkPatch)
    now = utcnow()
    changes = await hashed(request, checked_changes(request, body, now), user)  # before the lock
    async with store(request).transaction() as tx:
        old = await repository.link_for_update(tx, code)
        if old is None or old.owner_id != user.id:
            raise _not_found(code)
        link = msgspec.structs.replace(old, **changes)
        if old.max_visits is None and link.max_visits is not None:
            await _restart_count(request, code)
        await repository.save_link(tx, link, now, old_tags=old.tags)
        await tx.append(repository.link_event(LinkUpdated, link, trace_id(request)))
    link_changed(request.app, link.code)
    return json_response(_out(request, link))


async def _restart_count(request: web.Request, code: str) -> None:
    # Visits served while the link had no limit were not counted in Redis: its counter
    # starts again from the database, or the PATCH fails with nothing written.
    try:
        await request.app[VISIT_LIMITER].restart(code)
    except LimitUnknown:
        raise DependencyDown("Redis is unavailable; a visit limit cannot be set now") from None


# A link's password is hashed in the account's share of the process's password hasher.
_HASHES_CLAIMED = too_many(
    "a password is being set and this account has SLUICE_PASSWORD_HASH_PER_CLAIMANT"
    " passwords being hashed already; nothing was changed"
)
_HASHER_FULL = problem(
    "a password is being set and this process is hashing as many passwords as it takes"
    " (Retry-After); nothing was changed"
)

ROUTES = (
    Route(
        "POST",
        "/v1/links",
        create_link,
        {
            "operationId": "createLink",
            "summary": "Shorten a URL, under an alias or a generated 6-character code",
            "description": (
                "`url`: absolute http(s) with a host, at most 2048 characters, no user or "
                "password, not this service's own short domain. `alias`: "
                "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$, unique (case-sensitively), not a reserved "
                "word. `expires_at`: RFC 3339 with an offset, in the future. `max_visits`: an "
                "integer of at least 1; once that many GET redirects were served (across every "
                "replica; HEAD never counts), 410. `valid_since`: RFC 3339 with an offset; "
                "before it the code answers 404, as an unknown one. `redirect_status`: 301, "
                "302 (default), 307 or 308. `tags`: up to 10 distinct of ^[a-z0-9-]{1,32}$ "
                "(duplicates dropped). `title`: at most 200 characters. `rules`: up to 10 of "
                "`{when: {device?, os?, language?, country?}, url}`; a redirect goes to the "
                "`url` of the first rule whose conditions all hold, else to `url` (device "
                "mobile|tablet|desktop, os android|ios|windows|macos|linux, language a primary "
                "tag such as `fr`, country ISO 3166-1 alpha-2 such as `FR`; each rule's `url` "
                "follows the rules of `url`). `password`: 8 to 128 characters; `GET /{code}` "
                "then answers a form and only `POST /{code}` with the password opens the "
                "target (a page that refreshes to it) and records the visit. It is kept as a "
                "scrypt hash and never answered: links show `has_password`. Unknown fields are "
                "refused (400). A user has at most SLUICE_LINKS_PER_USER links (default "
                "100000), however made; beyond it, 403."
            ),
            "security": USER,
            "requestBody": request_body(LinkBody),
            "responses": {
                "201": ok(LinkOut, "the new link"),
                **BAD_BODY,
                "401": UNAUTHORIZED,
                "403": problem(
                    "you have SLUICE_LINKS_PER_USER links already (links are never"
                    " deleted: waiting does not help)"
                ),
                "409": problem("the alias is taken"),
                "422": problem(
                    "invalid or missing url, invalid or reserved alias, "
                    "expiry not in the future, or an invalid max_visits, "
                    "valid_since, redirect_status, tags, title, rules (each "
                    "broken rule named by its path, as `rules[2].when.os`) or "
                    "password (not 8 to 128 characters)"
                ),
                "429": _HASHES_CLAIMED,
                "503": _HASHER_FULL,
            },
        },
        structs=(LinkBody, LinkOut),
    ),
    Route(
        "GET",
        "/v1/links",
        list_links,
        {
            "operationId": "listLinks",
            "summary": "The caller's links, newest first",
            "description": "With `tag`, only the links that have that tag.",
            "security": USER,
            "parameters": [
                limit_query(PAGE_DEFAULT, PAGE_MAX),
                {
                    "name": "cursor",
                    "in": "query",
                    "required": False,
                    "description": "`next_cursor` of the previous page",
                    "schema": {"type": "string"},
                },
                {
                    "name": "tag",
                    "in": "query",
                    "required": False,
                    "description": "only links with this tag",
                    "schema": {"type": "string", "pattern": "^[a-z0-9-]{1,32}$"},
                },
            ],
            "responses": {
                "200": ok(LinkPage, "one page; `next_cursor` is null on the last one"),
                "401": UNAUTHORIZED,
                "422": problem(
                    f"a limit outside 1..{PAGE_MAX}, a cursor this API did not "
                    "return, or a tag that is not ^[a-z0-9-]{1,32}$"
                ),
            },
        },
        structs=(LinkPage,),
    ),
    Route(
        "GET",
        "/v1/links/{code}",
        read_link,
        {
            "operationId": "getLink",
            "summary": "One of the caller's links",
            "description": "Every field as stored, `rules` included (`[]` for none).",
            "security": USER,
            "parameters": [CODE],
            "responses": {"200": ok(LinkOut, "the link"), "401": UNAUTHORIZED, "404": NO_LINK},
        },
        structs=(LinkOut,),
    ),
    Route(
        "PATCH",
        "/v1/links/{code}",
        patch_link,
        {
            "operationId": "updateLink",
            "summary": "Change a link's fields",
            "description": (
                "Absent fields keep their value; null clears `expires_at`, `max_visits`, "
                "`valid_since`, `tags`, `title`, `rules` and `password` (the link redirects "
                "again without a form). The fields follow the rules of createLink; "
                "a new `max_visits` applies at once (visits already served count). Every API "
                "replica redirects by the new state within a second. The code never changes "
                "and links are never deleted."
            ),
            "security": USER,
            "parameters": [CODE],
            "requestBody": request_body(LinkPatch),
            "responses": {
                "200": ok(LinkOut, "the link as changed"),
                **BAD_BODY,
                "401": UNAUTHORIZED,
                "404": NO_LINK,
                "422": problem(
                    "invalid url, an expiry not in the future, or an invalid "
                    "max_visits, valid_since, redirect_status, tags, title, "
                    "rules or password"
                ),
                "429": _HASHES_CLAIMED,
                "503": problem(
                    "a visit limit is being set and Redis, which counts the "
                    "visits, is unavailable, or this process is checking as many "
                    "passwords as it takes (Retry-After); nothing was changed"
                ),
            },
        },
        structs=(LinkPatch, LinkOut),
    ),
)
