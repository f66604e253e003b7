"""What an app's HTTP views use: the process's resources, the caller, bodies and errors.

A view is a plain aiohttp handler. It reads what it needs from the request with the
accessors below (the store, Redis, the configuration, the request's trace id), raises
the errors below for a 4xx (the API answers them as problem+json, with the fields that
were wrong), and writes its state and appends its events in one transaction::

    async with store(request).transaction() as tx:
        await tx.execute("INSERT INTO orders ...", (...))
        await tx.append(OrderPlaced(...))

Events appended while a request is served carry its trace id unless given another.
The OpenAPI pieces (``ok``, ``problem``, ``request_body``, ``USER``...) build the
operation declared beside each view (``App.route``), as sluice's own routes do; they,
the errors and the body helpers are sluice.http's own, exported by ``sluice.app``.
"""

from __future__ import annotations

from aiohttp import web
from redis.asyncio import Redis

from sluice.config import Config
from sluice.http.app_keys import CONFIG, REDIS, STORE, TRACE_ID
from sluice.store import Store


def _app(where: web.Request | web.Application) -> web.Application:
    return where if isinstance(where, web.Application) else where.app


def store(where: web.Request | web.Application) -> Store:
    """The store of this API process (SQLite or PostgreSQL, as configured), from a
    request or, in an ``App.api_context``, from the application."""
    return _app(where)[STORE]


def redis(where: web.Request | web.Application) -> Redis:
    """The Redis client of this API process (a cluster client on a Redis Cluster)."""
    return _app(where)[REDIS]


def config(where: web.Request | web.Application) -> Config:
    """The deployment's configuration, as this API process read it at start."""
    return _app(where)[CONFIG]


def trace_id(request: web.Request) -> str:
    """The request's trace id (the one a ``traceparent`` continues, else new)."""
    return request[TRACE_ID]
