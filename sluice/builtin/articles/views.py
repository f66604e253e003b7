"""Article views: count a view (deduped per viewer), read totals and leaderboards."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from datetime import date

import structlog
from aiohttp import web

from sluice.app import (
    USER,
    DependencyDown,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    config,
    from_db_time,
    json_response,
    limit_query,
    ok,
    optional_user,
    parse_limit,
    problem,
    read_json,
    redis,
    ref,
    store,
    trace_id,
    utcnow,
)
from sluice.app.advanced import JSON, KEYS, REDIS_ERRORS, REDIS_TIMEOUT, VISITOR_KEY, visitor_hash
from sluice.builtin.articles.app import app
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.articles.keys import ArticlesKeys
from sluice.builtin.articles.periods import PERIODS, period_start
from sluice.builtin.articles.projection import top_from_redis, top_from_store, views_of
from sluice.builtin.articles.schemas import (
    VIEWER_MAX_LENGTH,
    ArticleViews,
    TopArticles,
    TopItem,
    TopSnapshot,
    ViewBody,
    ViewCounted,
)
from sluice.builtin.articles.settings import ArticlesSettings

log = structlog.get_logger(__name__)

ARTICLE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOP_LIMIT_MAX = 100
TOP_LIMIT_DEFAULT = 10
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _article_id(request: web.Request) -> str:
    article_id = request.match_info["article_id"]
    if not ARTICLE_ID.fullmatch(article_id):
        raise Unprocessable(
            "invalid article id",
            [FieldError("article_id", "must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -")],
        )
    if article_id == "top":  # GET /v1/articles/top is the leaderboard: never readable
        raise Unprocessable(
            "invalid article id",
            [FieldError("article_id", "'top' is reserved for the leaderboard")],
        )
    return article_id


async def viewer_identity(request: web.Request, body: ViewBody) -> str:
    """Who this view counts for: the authenticated user, else the body's ``viewer``,
    else an anonymous visitor (keyed hash of IP and User-Agent). A ``viewer`` out of
    bounds is refused even when a token decides (the same body is valid or not alike).

    Each in a namespace of its own, so a body cannot name another kind: ``user:<id>``
    (only from a token), ``viewer:<as sent>``, and 64 hex digits for a visitor.
    Without the prefix, an anonymous ``{"viewer": "user:<id>"}`` took a logged-in
    user's dedupe slot (docs/guides/security.md)."""
    if body.viewer is not None and not 1 <= len(body.viewer) <= VIEWER_MAX_LENGTH:
        message = f"must be 1 to {VIEWER_MAX_LENGTH} characters"
        raise Unprocessable("invalid viewer", [FieldError("viewer", message)])
    user = await optional_user(request)
    if user is not None:
        return f"user:{user.id}"
    if body.viewer is not None:
        return f"viewer:{body.viewer}"
    user_agent = request.headers.get("User-Agent", "")
    return visitor_hash(request.app[VISITOR_KEY], request.remote or "", user_agent)


async def _claim_view(request: web.Request, key: str) -> bool | None:
    """True if this viewer is new in the window, False if seen, None if Redis cannot tell."""
    try:
        async with asyncio.timeout(REDIS_TIMEOUT):
            claimed = await redis(request).set(
                key, 1, nx=True, ex=ArticlesSettings.of(request).view_dedupe_seconds
            )
    except REDIS_ERRORS as exc:
        # Degrade, never break: an undeduped view beats a lost one.
        log.warning("view dedupe unavailable, counting", error=repr(exc))
        return None
    return bool(claimed)


async def _release_view(request: web.Request, key: str) -> None:
    """Best effort: the view was not stored, so the viewer may try again at once."""
    with contextlib.suppress(*REDIS_ERRORS):
        async with asyncio.timeout(REDIS_TIMEOUT):
            await redis(request).delete(key)


async def post_view(request: web.Request) -> web.Response:
    """Count one view of an article unless this viewer was counted within the window."""
    article_id = _article_id(request)
    body = await read_json(request, ViewBody, optional=True)
    viewer = await viewer_identity(request, body)
    digest = hashlib.sha256(viewer.encode()).hexdigest()[:32]
    key = ArticlesKeys(request.app[KEYS].prefix).view_seen(article_id, digest)
    claimed = await _claim_view(request, key)
    if claimed is False:
        return json_response(ViewCounted(counted=False), 202)
    event = ArticleViewed(article_id=article_id, viewer=viewer, trace_id=trace_id(request))
    try:
        async with store(request).transaction() as tx:
            await tx.append(event)
    except Exception as exc:  # whatever the backend raises, the view was not stored
        log.exception("view not stored")
        if claimed:
            await _release_view(request, key)
        raise DependencyDown("the database is unavailable; the view was not counted") from exc
    return json_response(ViewCounted(counted=True), 202)


async def get_article(request: web.Request) -> web.Response:
    article_id = _article_id(request)
    views = await views_of(store(request), article_id)
    return json_response(ArticleViews(article_id=article_id, views=views, as_of=utcnow()))


def _top_query(request: web.Request) -> tuple[str, int]:
    errors: list[FieldError] = []
    period = request.query.get("period", "day")
    if period not in PERIODS:
        errors.append(FieldError("period", f"must be one of {', '.join(PERIODS)}"))
    limit = parse_limit(request.query.get("limit", str(TOP_LIMIT_DEFAULT)), TOP_LIMIT_MAX) or 0
    if not limit:
        errors.append(FieldError("limit", f"must be an integer from 1 to {TOP_LIMIT_MAX}"))
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    return period, limit


async def top_articles(request: web.Request) -> web.Response:
    """The current period's most viewed articles: Redis first, the database as the fallback."""
    period, limit = _top_query(request)
    start = period_start(period, utcnow(), config(request).zone)
    rows: list[tuple[str, int]] | None = None
    try:
        async with asyncio.timeout(REDIS_TIMEOUT):
            rows = await top_from_redis(redis(request), request.app[KEYS], period, start, limit)
    except REDIS_ERRORS as exc:
        log.warning("leaderboard from redis failed, reading the database", error=repr(exc))
    if rows is None:
        rows = await top_from_store(store(request), period, start, limit)
    items = [TopItem(article_id=article, views=views) for article, views in rows]
    return json_response(TopArticles(period=period, start=start, items=items))


async def top_snapshot(request: web.Request) -> web.Response:
    """The stored top 100 of a past day (``snapshot-leaderboard``); 404 when none was taken."""
    raw = request.match_info["date"]
    try:
        day = date.fromisoformat(raw) if DAY.fullmatch(raw) else None
    except ValueError:
        day = None
    if day is None:
        raise Unprocessable("invalid date", [FieldError("date", "must be a date, YYYY-MM-DD")])
    rows = await store(request).fetchall(
        "SELECT article_id, views, taken_at FROM leaderboard_snapshots WHERE day = ? ORDER BY rank",
        (day.isoformat(),),
    )
    if not rows:
        raise NotFound(f"no leaderboard snapshot for {day.isoformat()}")
    items = [TopItem(article_id=str(a), views=int(v)) for a, v, _ in rows]
    taken_at = from_db_time(rows[0][2])
    return json_response(TopSnapshot(date=day, taken_at=taken_at, items=items))


_ARTICLE_ID = {
    "name": "article_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
}
_BAD_ARTICLE_ID = problem(
    "the article id does not match ^[A-Za-z0-9_-]{1,64}$, or is 'top' (the leaderboard)"
)

# /v1/articles/top before /v1/articles/{article_id}, so "top" is not taken for an article id.
app.add_routes(
    (
        Route(
            "GET",
            "/v1/articles/top",
            top_articles,
            {
                "operationId": "topArticles",
                "summary": "The current period's most viewed articles, highest first",
                "parameters": [
                    {
                        "name": "period",
                        "in": "query",
                        "required": False,
                        "schema": {"enum": ["day", "week", "month"], "default": "day"},
                    },
                    limit_query(TOP_LIMIT_DEFAULT, TOP_LIMIT_MAX),
                ],
                "responses": {
                    "200": ok(TopArticles, "the leaderboard; `start` is the period's first day"),
                    "422": problem(f"unknown period or a limit outside 1..{TOP_LIMIT_MAX}"),
                },
            },
            structs=(TopArticles,),
        ),
        Route(
            "GET",
            "/v1/articles/top/{date}",
            top_snapshot,
            {
                "operationId": "topSnapshot",
                "summary": "The stored top 100 articles of a past day (snapshot-leaderboard task)",
                "parameters": [
                    {
                        "name": "date",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "format": "date"},
                    }
                ],
                "responses": {
                    "200": ok(TopSnapshot, "the snapshot, highest first"),
                    "404": problem("no snapshot was taken for that day"),
                    "422": problem("the date is not YYYY-MM-DD"),
                },
            },
            structs=(TopSnapshot,),
        ),
        Route(
            "GET",
            "/v1/articles/{article_id}",
            get_article,
            {
                "operationId": "getArticle",
                "summary": "An article's total views (0 if never viewed)",
                "parameters": [_ARTICLE_ID],
                "responses": {"200": ok(ArticleViews, "the total"), "422": _BAD_ARTICLE_ID},
            },
            structs=(ArticleViews,),
        ),
        Route(
            "POST",
            "/v1/articles/{article_id}/views",
            post_view,
            {
                "operationId": "postView",
                "summary": "Count a view, once per viewer within the dedupe window",
                "description": (
                    "The viewer is the user of the bearer token if one is sent, else `viewer` from "
                    "the body, else a keyed hash of client IP "
                    "and User-Agent. The token and the body "
                    "are optional."
                ),
                "security": [{}, *USER],
                "parameters": [_ARTICLE_ID],
                "requestBody": {"required": False, "content": {JSON: {"schema": ref(ViewBody)}}},
                "responses": {
                    "202": ok(ViewCounted, "`counted` is false for a viewer already counted"),
                    "400": problem("malformed JSON, or a field of the wrong type"),
                    "401": problem(
                        "a bearer token was sent, but it is malformed, unknown or expired"
                    ),
                    "413": problem("the body is larger than 64 KiB"),
                    "415": problem("the body is not application/json"),
                    "422": problem(
                        f"invalid article id, or a viewer not 1 to {VIEWER_MAX_LENGTH} characters"
                    ),
                    "503": problem("the database is unavailable; nothing was counted"),
                },
            },
            structs=(ViewBody, ViewCounted),
        ),
    )
)
