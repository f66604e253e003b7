"""The HTTP API: ``create_app(config)`` assembles it without doing any I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from sluice.config import Config
from sluice.http import (
    admin,
    articles,
    dashboard,
    fast_redirect,
    health,
    jobs,
    link_stats,
    links,
    metrics,
    redirects,
    reminders,
    tasks,
    unsubscribe,
    users,
    verification,
)
from sluice.http.admin_token import AdminToken
from sluice.http.client_limit import ClientLimits
from sluice.http.connections import GuardedSite
from sluice.http.keys import (
    ADMIN_TOKEN,
    CLIENT_LIMITS,
    CONFIG,
    KEYS,
    LOGIN_LIMITER,
    MAIL_LINK_KEY,
    NOTIFIER,
    REDIS,
    STORE,
    UPCOMING,
    VISITOR_KEY,
)
from sluice.http.login_limit import LoginLimiter
from sluice.http.middlewares import request_context
from sluice.http.openapi import openapi_view
from sluice.http.visitors import load_visitor_key
from sluice.mail.links import LinkKey
from sluice.resources import keys_for, redis_client
from sluice.scheduler.upcoming import NextRuns
from sluice.store import open_store
from sluice.streams.notify import CommitNotifier

__all__ = ["MAX_BODY", "create_app"]

MAX_BODY = 64 * 1024


async def _secrets(app: web.Application) -> AsyncIterator[None]:
    app[VISITOR_KEY] = await load_visitor_key(app[CONFIG], app[STORE])
    app[MAIL_LINK_KEY] = LinkKey(app[STORE])
    app[ADMIN_TOKEN] = AdminToken(app[CONFIG].admin_token, app[STORE])
    yield


async def _store(app: web.Application) -> AsyncIterator[None]:
    app[STORE] = await open_store(app[CONFIG])
    try:
        yield
    finally:
        await app[STORE].close()


async def _redis(app: web.Application) -> AsyncIterator[None]:
    app[REDIS] = redis_client(app[CONFIG], retry=False)
    app[LOGIN_LIMITER] = LoginLimiter(app[REDIS], app[KEYS])
    app[CLIENT_LIMITS] = ClientLimits(app[REDIS], app[KEYS], app[CONFIG])
    try:
        yield
    finally:
        await app[REDIS].aclose()


async def _notifier(app: web.Application) -> AsyncIterator[None]:
    """Wake the relay after each commit of this process."""
    notifier = CommitNotifier(app[REDIS], app[KEYS].outbox_channel())
    app[STORE].add_commit_listener(notifier.notify)
    app[NOTIFIER] = notifier
    try:
        yield
    finally:
        await notifier.close()


def _add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/healthz", health.healthz)
    router.add_get("/readyz", health.readyz)
    router.add_get("/openapi.json", openapi_view)
    router.add_get("/metrics", metrics.metrics)
    router.add_get("/admin", dashboard.admin_page)
    # Before the {article_id} route, so "top" is not taken for an article id.
    router.add_get("/v1/articles/top", articles.top_articles)
    router.add_get("/v1/articles/top/{date}", articles.top_snapshot)
    router.add_get("/v1/articles/{article_id}", articles.get_article)
    router.add_post("/v1/articles/{article_id}/views", articles.post_view)
    router.add_post("/v1/users", users.register)
    router.add_post("/v1/tokens", users.create_token)
    router.add_delete("/v1/tokens/current", users.delete_current_token)
    router.add_get("/v1/me", users.me)
    router.add_post("/v1/me/verification", verification.request_link)
    router.add_get("/v1/verify", verification.verify_page)
    router.add_post("/v1/users/verify", verification.verify)
    router.add_get("/v1/unsubscribe", unsubscribe.unsubscribe_page)
    router.add_post("/v1/unsubscribe", unsubscribe.unsubscribe)
    router.add_post("/v1/links", links.create_link)
    router.add_get("/v1/links", links.list_links)
    router.add_get("/v1/links/{code}", links.read_link)
    router.add_patch("/v1/links/{code}", links.patch_link)
    router.add_get("/v1/admin/streams", admin.streams)
    router.add_get("/v1/admin/archive", admin.archive)
    router.add_get("/v1/admin/dead-letters", admin.dead_letters)
    router.add_post("/v1/admin/dead-letters/{id}/redrive", admin.redrive)
    router.add_delete("/v1/admin/dead-letters/{id}", admin.drop)
    router.add_get("/v1/admin/tasks", tasks.list_tasks)
    router.add_post("/v1/admin/tasks/{name}/runs", tasks.start_run)
    router.add_get("/v1/admin/tasks/{name}/runs", tasks.list_runs)
    router.add_get("/v1/links/{code}/stats", link_stats.link_stats)
    router.add_post("/v1/reminders", reminders.create_reminder)
    router.add_get("/v1/reminders", reminders.list_reminders)
    router.add_delete("/v1/reminders/{id}", reminders.delete_reminder)
    router.add_post("/v1/links/{code}/exports", jobs.request_export)
    router.add_get("/v1/jobs/{job_id}", jobs.read_job)
    router.add_get("/v1/jobs/{job_id}/result", jobs.job_result)
    # Last of all, so /{code} never shadows another route; HEAD comes with it.
    router.add_get("/{code}", redirects.redirect)


def create_app(config: Config) -> web.Application:
    """The API application; its resources open on startup and close on cleanup."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[request_context])
    app[CONFIG] = config
    app[KEYS] = keys_for(config)
    app[UPCOMING] = NextRuns()
    app.cleanup_ctx.extend([_store, _secrets, _redis, _notifier])
    app.cleanup_ctx.append(links.code_pool)
    app.cleanup_ctx.append(users.password_hashing)
    app.cleanup_ctx.append(tasks.task_runner)
    app.cleanup_ctx.extend([redirects.follow_links, redirects.record_visits])
    app.cleanup_ctx.append(metrics.publish_counters)
    _add_routes(app.router)
    return app


async def listen(
    app: web.Application, *, reuse_port: bool = False
) -> tuple[web.AppRunner, GuardedSite]:
    """``app`` started and listening as ``sluice api`` serves it: redirects answered
    first (``fast_redirect``), connections under the deadlines and cap of SPEC 15
    (``GuardedSite``); ``reuse_port``: beside other processes on the same port
    (``SO_REUSEPORT``). Clean up with ``runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        assert runner.server is not None
        fast_redirect.install(runner.server, app)
        site = GuardedSite(runner, app[CONFIG], reuse_port=reuse_port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site
