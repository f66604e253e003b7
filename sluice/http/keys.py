"""Every piece of aiohttp state, behind typed keys kept in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from aiohttp import web

from sluice.builtin.accounts.login_limit import LoginLimiter
from sluice.builtin.accounts.mail.links import LinkKey
from sluice.builtin.links.cache import ChangeHints, LinkCache, LinkFollower
from sluice.builtin.links.limits import VisitLimiter
from sluice.builtin.links.orphans import OrphanTally
from sluice.builtin.links.visits import VisitRecorder
from sluice.builtin.reminders.upcoming import NextRuns
from sluice.config import Config
from sluice.http.admin_token import AdminToken
from sluice.http.client_limit import ClientLimits
from sluice.passwords import PasswordHasher
from sluice.scheduler.runner import Runner
from sluice.scheduler.tasks import Task
from sluice.store import Store
from sluice.streams.keys import Keys
from sluice.streams.notify import CommitNotifier

if TYPE_CHECKING:
    from sluice.app.loading import Apps

CONFIG = web.AppKey("config", Config)
# The apps this deployment runs (SLUICE_APPS): their groups, routes, projections, tasks.
APPS: web.AppKey[Apps] = web.AppKey("apps")
KEYS = web.AppKey("keys", Keys)
STORE: web.AppKey[Store] = web.AppKey("store")
REDIS = web.AppKey("redis", aioredis.Redis)
NOTIFIER = web.AppKey("notifier", CommitNotifier)
VISITOR_KEY = web.AppKey("visitor_key", bytes)
# The key of the signed links in mails (verification, one-click unsubscribe).
MAIL_LINK_KEY = web.AppKey("mail_link_key", LinkKey)
LOGIN_LIMITER = web.AppKey("login_limiter", LoginLimiter)
# Per client address: logins, registrations, failed admin authentications (SPEC 15).
CLIENT_LIMITS = web.AppKey("client_limits", ClientLimits)
# Password hashes of this process, bounded (SPEC 15).
PASSWORDS = web.AppKey("passwords", PasswordHasher)
# While no admin token is configured or generated, admin routes refuse everyone.
ADMIN_TOKEN = web.AppKey("admin_token", AdminToken)
# The redirect path: links cached in process, the stream follower, the change hints
# this process sends after its commits, the visit writer.
LINK_CACHE = web.AppKey("link_cache", LinkCache)
LINK_FOLLOWER = web.AppKey("link_follower", LinkFollower)
LINK_HINTS = web.AppKey("link_hints", ChangeHints)
VISITS = web.AppKey("visits", VisitRecorder)
# GETs of unknown codes, counted in process and written in batches (SPEC 13).
ORPHANS = web.AppKey("orphans", OrphanTally)
# The Redis gate of links with max_visits.
VISIT_LIMITER = web.AppKey("visit_limiter", VisitLimiter)

# Scheduled tasks by name, and the runner of manual runs (admin routes).
TASKS: web.AppKey[dict[str, Task]] = web.AppKey("tasks")
TASK_RUNNER = web.AppKey("task_runner", Runner)
# Reminders' next runs: cached windows, and the one worker thread for cron work.
UPCOMING = web.AppKey("upcoming", NextRuns)

TRACE_ID = web.RequestKey("trace_id", str)
# Set by a redirect that recorded its visit: no request line (SLUICE_REDIRECT_LOG=errors).
QUIET = web.RequestKey("quiet", bool)
