"""The core's aiohttp state, behind typed keys kept in one place (each app keeps its own
beside its routes: ``sluice.builtin.links.http.keys``, say)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from aiohttp import web

from sluice.config import Config
from sluice.http.account_logins import AccountLogins
from sluice.http.admin_token import AdminToken
from sluice.http.body_limits import LargeBodies
from sluice.http.client_limit import ClientLimits
from sluice.relay.notify import CommitNotifier
from sluice.scheduler.runner import Runner
from sluice.scheduler.task_spec import Task
from sluice.security.passwords import PasswordHasher
from sluice.store import Store
from sluice.store.users import User
from sluice.streams.engine_keys import Keys

if TYPE_CHECKING:
    from sluice.app.loading import Apps

# The process's settings, as loaded (``Config``).
CONFIG = web.AppKey("config", Config)
# The apps this deployment runs (SLUICE_APPS): their groups, routes, projections, tasks.
APPS: web.AppKey[Apps] = web.AppKey("apps")
# The Redis key and stream names of this deployment (``Keys``: its prefix, its topology).
KEYS = web.AppKey("keys", Keys)
# The database (SQLite or PostgreSQL), behind the ``Store`` protocol.
STORE: web.AppKey[Store] = web.AppKey("store")
# The process's Redis client (one for a server, a cluster client for Redis Cluster).
REDIS = web.AppKey("redis", aioredis.Redis)
NOTIFIER = web.AppKey("notifier", CommitNotifier)
# The secret that visitor hashes are keyed with, loaded from the store at start.
VISITOR_KEY = web.AppKey("visitor_key", bytes)
# Failed logins per email, counted across replicas (docs/guides/security.md).
LOGIN_LIMITER = web.AppKey("login_limiter", AccountLogins)
# Per client address: logins, registrations, failed admin authentications (docs/guides/security.md).
CLIENT_LIMITS = web.AppKey("client_limits", ClientLimits)
# Password hashes of this process, bounded (docs/guides/security.md).
PASSWORDS = web.AppKey("passwords", PasswordHasher)
# While no admin token is configured or generated, admin routes refuse everyone.
ADMIN_TOKEN = web.AppKey("admin_token", AdminToken)

# The routes that take bodies larger than MAX_BODY, and their admission (body_limits).
LARGE_BODIES: web.AppKey[LargeBodies] = web.AppKey("large_bodies")

# Scheduled tasks by name, and the runner of manual runs (admin routes).
TASKS: web.AppKey[dict[str, Task]] = web.AppKey("tasks")
TASK_RUNNER = web.AppKey("task_runner", Runner)

# What apps count on the request path, published to /metrics once a second (http.metrics).
PUBLISHERS: web.AppKey[list[Callable[[], None]]] = web.AppKey("publishers")

# The request's trace id (W3C), set by the trace middleware: events it appends carry it.
TRACE_ID = web.RequestKey("trace_id", str)
# The user of the request's bearer token, once looked up (an upload's admission and its
# view both ask: the database is asked once).
USER = web.RequestKey("user", User)
# Set by a redirect that recorded its visit: no request line (SLUICE_REDIRECT_LOG=errors).
QUIET = web.RequestKey("quiet", bool)
