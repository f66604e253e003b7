"""The HTTP server (core): connections, the wire and fast paths, limits, middlewares,
problems, auth, OpenAPI, and the core's routes. ``create_app(config, apps, tasks)``
builds it without doing any I/O: the core's routes and resources, then the routes and
API contexts of ``apps``, handed over by the process's assembly (``sluice.app.assembly``).
Imports the engine; no app, and not the loading of apps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING

from aiohttp import hdrs, web

from sluice.config import Config
from sluice.http import aiohttp_compat, fast_redirect, metrics_route, task_controls, task_routes
from sluice.http.account_logins import AccountLogins
from sluice.http.admin_token import AdminToken
from sluice.http.app_keys import (
    ADMIN_TOKEN,
    APPS,
    CLIENT_LIMITS,
    CONFIG,
    KEYS,
    LARGE_BODIES,
    LOGIN_LIMITER,
    NOTIFIER,
    PASSWORDS,
    REDIS,
    STORE,
    TASKS,
    VISITOR_KEY,
)
from sluice.http.body_limits import declared
from sluice.http.client_limit import ClientLimits
from sluice.http.connections import GuardedSite
from sluice.http.middlewares import request_context
from sluice.http.openapi import routes_of
from sluice.http.redirect_wire import WireRedirects
from sluice.http.route_docs import Route
from sluice.http.visitors import load_visitor_key
from sluice.process.resources import keys_for, redis_client
from sluice.relay.notify import CommitNotifier
from sluice.scheduler.task_spec import Task
from sluice.security.passwords import PasswordHasher
from sluice.store import open_store

if TYPE_CHECKING:
    from sluice.app.loading import Apps

__all__ = ["MAX_BODY", "create_app"]

MAX_BODY = 64 * 1024


async def _secrets(app: web.Application) -> AsyncIterator[None]:
    app[VISITOR_KEY] = await load_visitor_key(app[CONFIG], app[STORE])
    app[ADMIN_TOKEN] = AdminToken(app[CONFIG].admin_token, app[STORE])
    yield


async def _store(app: web.Application) -> AsyncIterator[None]:
    app[STORE] = await open_store(app[CONFIG], app[APPS].schema)
    try:
        yield
    finally:
        await app[STORE].close()


async def _redis(app: web.Application) -> AsyncIterator[None]:
    app[REDIS] = redis_client(app[CONFIG], retry=False)
    app[LOGIN_LIMITER] = AccountLogins(app[REDIS], app[KEYS])
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


async def _password_hashing(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: this process's password hasher, bounded by SLUICE_PASSWORD_HASH_CONCURRENCY
    with a queue of SLUICE_PASSWORD_HASH_QUEUE waiting SLUICE_PASSWORD_HASH_WAIT_SECONDS."""
    config = app[CONFIG]
    app[PASSWORDS] = PasswordHasher(
        config.password_hash_concurrency,
        queue=config.password_hash_queue,
        wait=config.password_hash_wait_seconds,
        per_claimant=config.password_hash_per_claimant,
    )
    try:
        yield
    finally:
        app[PASSWORDS].close()


def _add_routes(router: web.UrlDispatcher, routes: Sequence[Route]) -> None:
    """Every route, in its order. A GET answers HEAD too (``add_get``), as aiohttp has it,
    unless its path declares a HEAD of its own (the redirect's)."""
    own_head = {route.path for route in routes if route.method == hdrs.METH_HEAD}
    for route in routes:
        if route.method == hdrs.METH_GET:
            router.add_get(route.path, route.view, allow_head=route.path not in own_head)
        else:
            router.add_route(route.method, route.path, route.view)


def create_app(config: Config, apps: Apps, known: Mapping[str, Task]) -> web.Application:
    """The API application serving ``apps`` (their routes, contexts and migrations) and
    knowing the tasks ``known``; its resources open on startup and close on cleanup: the core's
    first (store, secrets, Redis, password hashing, tasks), then each app's
    ``api_context`` in the apps' order."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[request_context])
    app[CONFIG] = config
    app[APPS] = apps
    app[TASKS] = dict(known)
    app[KEYS] = keys_for(config)
    app.cleanup_ctx.extend([_store, _secrets, _redis, _notifier, _password_hashing])
    app.cleanup_ctx.extend(
        [task_routes.task_runner, task_controls.backfills, metrics_route.publish_counters]
    )
    for each in apps.apps:
        app.cleanup_ctx.extend(each.api_contexts)
    routes = routes_of(apps)
    _add_routes(app.router, routes)
    app[LARGE_BODIES] = declared(routes)
    return app


async def listen(
    app: web.Application, *, reuse_port: bool = False
) -> tuple[web.AppRunner, GuardedSite]:
    """``app`` started and listening as ``sluice api`` serves it: redirects answered
    first, as their heads are parsed (``redirect_wire``) or before the router
    (``fast_redirect``), connections under the deadlines and cap of docs/guides/security.md
    (``GuardedSite``); the first, and the head deadline, only on an aiohttp whose
    internals they know (``aiohttp_compat``; one warning otherwise); ``reuse_port``:
    beside other processes on the same port (``SO_REUSEPORT``). Clean up with
    ``runner.cleanup()``."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        assert runner.server is not None
        fit = aiohttp_compat.check(runner.server)
        redirects = fast_redirect.install(runner.server, app)
        wire = None if redirects is None or not fit.wire else WireRedirects(redirects)
        site = GuardedSite(
            runner, app[CONFIG], reuse_port=reuse_port, wire=wire, head_deadline=fit.head_deadline
        )
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site
