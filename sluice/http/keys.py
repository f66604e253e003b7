"""Every piece of aiohttp state, behind typed keys kept in one place."""

from __future__ import annotations

import redis.asyncio as aioredis
from aiohttp import web

from sluice.config import Config
from sluice.http.admin_token import AdminToken
from sluice.http.login_limit import LoginLimiter
from sluice.links.cache import ChangeHints, LinkCache, LinkFollower
from sluice.links.visits import VisitRecorder
from sluice.scheduler.runner import Runner
from sluice.scheduler.tasks import Task
from sluice.store import Store
from sluice.streams.keys import Keys
from sluice.streams.notify import CommitNotifier

CONFIG = web.AppKey("config", Config)
KEYS = web.AppKey("keys", Keys)
STORE: web.AppKey[Store] = web.AppKey("store")
REDIS = web.AppKey("redis", aioredis.Redis)
NOTIFIER = web.AppKey("notifier", CommitNotifier)
VISITOR_KEY = web.AppKey("visitor_key", bytes)
LOGIN_LIMITER = web.AppKey("login_limiter", LoginLimiter)
# While no admin token is configured or generated, admin routes refuse everyone.
ADMIN_TOKEN = web.AppKey("admin_token", AdminToken)
# The redirect path: links cached in process, the stream follower, the change hints
# this process sends after its commits, the visit writer.
LINK_CACHE = web.AppKey("link_cache", LinkCache)
LINK_FOLLOWER = web.AppKey("link_follower", LinkFollower)
LINK_HINTS = web.AppKey("link_hints", ChangeHints)
VISITS = web.AppKey("visits", VisitRecorder)

# Scheduled tasks by name, and the runner of manual runs (admin routes).
TASKS: web.AppKey[dict[str, Task]] = web.AppKey("tasks")
TASK_RUNNER = web.AppKey("task_runner", Runner)

TRACE_ID = web.RequestKey("trace_id", str)
