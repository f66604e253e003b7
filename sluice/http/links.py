"""The caller's short links: create, list, read, change. Links are never deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import msgspec
import structlog
from aiohttp import web

from sluice.errors import Conflict, DependencyDown, FieldError, NotFound, Unprocessable
from sluice.events import LinkCreated, LinkUpdated, utcnow
from sluice.http.apidoc import (
    BAD_BODY,
    CODE,
    NO_LINK,
    UNAUTHORIZED,
    USER,
    Route,
    ok,
    problem,
    request_body,
)
from sluice.http.auth import require_user
from sluice.http.bodies import json_response, parse_limit, read_json
from sluice.http.keys import CONFIG, STORE, TRACE_ID
from sluice.http.redirects import link_changed
from sluice.http.schemas import LinkBody, LinkOut, LinkPage, LinkPatch
from sluice.links import repository
from sluice.links.pool import PoolRefiller
from sluice.links.rules import Invalid, check_alias, check_expiry, check_url, short_origin
from sluice.store.links import Link, get_link

log = structlog.get_logger(__name__)

PAGE_MAX = 100
PAGE_DEFAULT = 20

# The process's background refill of the code pool.
POOL_REFILLER = web.AppKey("pool_refiller", PoolRefiller)


async def code_pool(app: web.Application) -> AsyncIterator[None]:
    """Own the low-mark refill task. Nothing is refilled at startup: the first link that
    finds the pool low starts a refill in the background."""
    refiller = PoolRefiller(app[STORE], app[CONFIG].code_pool_target)
    app[POOL_REFILLER] = refiller
    try:
        yield
    finally:
        await refiller.close()


def _out(request: web.Request, link: Link) -> LinkOut:
    return LinkOut(
        code=link.code,
        short_url=f"{request.app[CONFIG].base_url}/{link.code}",
        url=link.url,
        expires_at=link.expires_at,
        disabled=link.disabled,
        created_at=link.created_at,
    )


class _Checks:
    """Collects every field's rule violation, so one 422 names them all."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def run(self, field: str, check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except Invalid as exc:
            self.errors.append(FieldError(field, str(exc)))
            return None

    def done(self, detail: str) -> None:
        if self.errors:
            raise Unprocessable(detail, self.errors)


async def create_link(request: web.Request) -> web.Response:
    """A new link under the alias given, else a code from the pool; ``LinkCreated`` with it."""
    user = await require_user(request)
    body = await read_json(request, LinkBody)
    now = utcnow()
    checks = _Checks()
    own = short_origin(request.app[CONFIG].base_url)
    url = checks.run("url", check_url, body.url or "", own)
    alias = None if body.alias is None else checks.run("alias", check_alias, body.alias)
    expires_at = None
    if body.expires_at is not None:
        expires_at = checks.run("expires_at", check_expiry, body.expires_at, now)
    checks.done("invalid link")
    draft = Link(
        code="", owner_id=user.id, url=url, expires_at=expires_at, disabled=False, created_at=now
    )
    try:
        async with request.app[STORE].transaction() as tx:
            link, pool_empty = await repository.create_link(tx, draft, alias=alias)
            await tx.append(
                LinkCreated(
                    code=link.code, owner_id=link.owner_id, url=link.url,
                    expires_at=link.expires_at, disabled=link.disabled,
                    trace_id=request[TRACE_ID],
                )
            )  # fmt: skip
    except repository.AliasTaken:
        raise Conflict(f"the alias {body.alias!r} is taken") from None
    except repository.NoFreeCode as exc:
        log.error("no free short code", attempts=repository.CODE_ATTEMPTS)
        raise DependencyDown(f"{exc}; try again") from None
    link_changed(request.app, link.code)  # a replica may have cached the code as unknown
    if alias is None:
        request.app[POOL_REFILLER].poke(empty=pool_empty)
    return json_response(_out(request, link), 201, headers={"Location": f"/v1/links/{link.code}"})


def _page_query(request: web.Request) -> tuple[int, tuple[str, str] | None]:
    checks = _Checks()
    limit = parse_limit(request.query.get("limit", str(PAGE_DEFAULT)), PAGE_MAX) or 0
    if not limit:
        checks.errors.append(FieldError("limit", f"must be an integer from 1 to {PAGE_MAX}"))
    cursor = request.query.get("cursor")
    after = None if cursor is None else checks.run("cursor", repository.decode_cursor, cursor)
    checks.done("invalid query parameters")
    return limit, after


async def list_links(request: web.Request) -> web.Response:
    """The caller's links, newest first; ``next_cursor`` is null on the last page."""
    user = await require_user(request)
    limit, after = _page_query(request)
    links = await repository.links_page(request.app[STORE], user.id, limit + 1, after)
    next_cursor = repository.encode_cursor(links[limit - 1]) if len(links) > limit else None
    items = [_out(request, link) for link in links[:limit]]
    return json_response(LinkPage(items=items, next_cursor=next_cursor))


def _not_found(code: str) -> NotFound:
    # The same answer for an unknown code and another user's link.
    return NotFound(f"you have no link {code!r}")


async def read_link(request: web.Request) -> web.Response:
    user = await require_user(request)
    code = request.match_info["code"]
    link = await get_link(request.app[STORE], code)
    if link is None or link.owner_id != user.id:
        raise _not_found(code)
    return json_response(_out(request, link))


def _changes(request: web.Request, body: LinkPatch, now: datetime) -> dict[str, Any]:
    checks = _Checks()
    changes: dict[str, Any] = {}
    if body.url is not msgspec.UNSET:
        own = short_origin(request.app[CONFIG].base_url)
        changes["url"] = checks.run("url", check_url, body.url, own)
    if body.expires_at is None:
        changes["expires_at"] = None
    elif body.expires_at is not msgspec.UNSET:
        changes["expires_at"] = checks.run("expires_at", check_expiry, body.expires_at, now)
    if body.disabled is not msgspec.UNSET:
        changes["disabled"] = body.disabled
    checks.done("invalid link change")
    return changes


async def patch_link(request: web.Request) -> web.Response:
    """Change url, expiry or disabled; absent fields keep their value, ``expires_at: null``
    removes the expiry. Every PATCH commits ``LinkUpdated`` with the link's full new state."""
    user = await require_user(request)
    code = request.match_info["code"]
    body = await read_json(request, LinkPatch)
    now = utcnow()
    changes = _changes(request, body, now)
    async with request.app[STORE].transaction() as tx:
        link = await repository.link_for_update(tx, code)
        if link is None or link.owner_id != user.id:
            raise _not_found(code)
        link = msgspec.structs.replace(link, **changes)
        await repository.save_link(tx, link, now)
        await tx.append(
            LinkUpdated(
                code=link.code, owner_id=link.owner_id, url=link.url,
                expires_at=link.expires_at, disabled=link.disabled, trace_id=request[TRACE_ID],
            )
        )  # fmt: skip
    link_changed(request.app, link.code)
    return json_response(_out(request, link))


ROUTES = (
    Route("POST", "/v1/links", create_link, {
        "operationId": "createLink",
        "summary": "Shorten a URL, under an alias or a generated 6-character code",
        "description": (
            "`url`: absolute http(s) with a host, at most 2048 characters, no user or "
            "password, not this service's own short domain. `alias`: "
            "^[A-Za-z0-9][A-Za-z0-9_-]{2,63}$, unique (case-sensitively), not a reserved "
            "word. `expires_at`: RFC 3339 with an offset, in the future. Unknown fields "
            "are refused (400)."
        ),
        "security": USER,
        "requestBody": request_body(LinkBody),
        "responses": {
            "201": ok(LinkOut, "the new link"),
            **BAD_BODY,
            "401": UNAUTHORIZED,
            "409": problem("the alias is taken"),
            "422": problem("invalid or missing url, invalid or reserved alias, "
                           "expiry not in the future"),
        },
    }, structs=(LinkBody, LinkOut)),
    Route("GET", "/v1/links", list_links, {
        "operationId": "listLinks",
        "summary": "The caller's links, newest first",
        "security": USER,
        "parameters": [
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_MAX,
                        "default": PAGE_DEFAULT}},
            {"name": "cursor", "in": "query", "required": False,
             "description": "`next_cursor` of the previous page", "schema": {"type": "string"}},
        ],
        "responses": {
            "200": ok(LinkPage, "one page; `next_cursor` is null on the last one"),
            "401": UNAUTHORIZED,
            "422": problem(f"a limit outside 1..{PAGE_MAX}, or a cursor this API did not "
                           "return"),
        },
    }, structs=(LinkPage,)),
    Route("GET", "/v1/links/{code}", read_link, {
        "operationId": "getLink",
        "summary": "One of the caller's links",
        "security": USER,
        "parameters": [CODE],
        "responses": {"200": ok(LinkOut, "the link"), "401": UNAUTHORIZED, "404": NO_LINK},
    }, structs=(LinkOut,)),
    Route("PATCH", "/v1/links/{code}", patch_link, {
        "operationId": "updateLink",
        "summary": "Change a link's url, expiry or disabled flag",
        "description": (
            "Absent fields keep their value; `expires_at: null` removes the expiry. "
            "The code never changes and links are never deleted."
        ),
        "security": USER,
        "parameters": [CODE],
        "requestBody": request_body(LinkPatch),
        "responses": {
            "200": ok(LinkOut, "the link as changed"),
            **BAD_BODY,
            "401": UNAUTHORIZED,
            "404": NO_LINK,
            "422": problem("invalid url, or an expiry not in the future"),
        },
    }, structs=(LinkPatch, LinkOut)),
)  # fmt: skip
