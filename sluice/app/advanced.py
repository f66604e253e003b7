"""Advanced hooks: the lower-level parts of the engine the built-in apps stand on.

``sluice.app`` is what a team's app needs; this module is what only an app reaching
into the engine's own machinery does: the redirect fast path's wire helpers, batch
handler groups and their outcomes, the operations records (deliveries, dead letters,
pauses, group history), the event history's reader and search, the keys of the API
process's state, Redis topology and the cron parser. It is public and versioned like
the rest of ``sluice.app`` (a name here changes only with a release note and an upgrade
path), but lower-level: these names follow the engine's layout and carry fewer
guarantees of convenience. Each import below says which built-in app uses it; the
built-in apps import nothing else of sluice but ``sluice.app`` and this module (an
import-linter contract holds it). The names are the engine's own, re-exported; the
documentation of each is its docstring there.
"""

from __future__ import annotations

# links
from sluice.config import Network, trusted_networks

# links, operations, reminders
from sluice.events import EVENT_TYPES, decode

# links
from sluice.history import catalog

# operations
from sluice.history import search as event_search

# links
from sluice.history.catalog import HEAD_SQL, SegmentRef

# links
from sluice.history.reader import read_history

# operations
from sluice.history.search import (
    COLUMNS,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    EventPage,
    EventQuery,
    FoundEvent,
    Invalid,
    found,
)

# operations
from sluice.history.size import HistorySize, measure

# accounts, links, operations, reminders
from sluice.http.apidoc import FORM, HTML_PAGE, Doc

# accounts, articles, links, operations
from sluice.http.bodies import JSON

# links
from sluice.http.body_limits import LargeBody

# links
from sluice.http.client_address import Caller, client_address, client_host, client_ip

# accounts
from sluice.http.client_limit import LOGIN, REGISTER

# links
from sluice.http.conditional import Validators, not_modified, requested_range

# articles, operations
from sluice.http.degrade import REDIS_ERRORS, REDIS_TIMEOUT

# links
from sluice.http.fast_redirect import NO_STORE, other_routes

# accounts, articles, links, operations, reminders
from sluice.http.keys import (
    APPS,
    CLIENT_LIMITS,
    CONFIG,
    KEYS,
    LOGIN_LIMITER,
    PASSWORDS,
    PUBLISHERS,
    QUIET,
    REDIS,
    STORE,
    TRACE_ID,
    VISITOR_KEY,
)

# links
from sluice.http.login_limit import MAX_FAILURES, WINDOW_SECONDS, LoginLimiter

# links
from sluice.http.middlewares import incoming_trace_id

# accounts, links, reminders
from sluice.http.pages import Form, is_form, onward_page, page, password_page, read_form

# links
from sluice.http.problems import problem_response

# operations
from sluice.http.static_page import Page, inline_hashes

# articles, links
from sluice.http.visitors import VisitorHasher, visitor_hash

# accounts, links
from sluice.passwords import DUMMY_HASH, Claim, ClaimantBusy, by_account, by_address

# links
from sluice.projections.base import Projection as EngineProjection

# links, reminders
from sluice.redis_cluster import refresh_topology, slot_groups

# links
from sluice.resources import redis_client

# reminders
from sluice.scheduler.cron import CronError, CronSchedule, min_interval, parse_cron, zone

# reminders
from sluice.scheduler.one_shots import Due, OneShotRunner

# accounts
from sluice.store.secrets import shared_secret

# accounts
from sluice.store.users import credentials, email_key, token_hash

# operations
from sluice.streams import deliveries, pause

# operations
from sluice.streams.attempts import DeliveryView

# links
from sluice.streams.cancel import CancelWatch, forget_signal, signal_cancel

# operations
from sluice.streams.dead_letters import (
    DeadLetter,
    Place,
    held_by,
    list_dead_letters,
    parse_dead_id,
    places_holding,
    redrive_matching,
)

# accounts, links
from sluice.streams.dispatch import EventHandler, event_group

# operations
from sluice.streams.failures import Failures

# operations
from sluice.streams.group_history.buckets import MAX_MINUTES

# operations
from sluice.streams.group_history.reading import History as GroupHistory

# operations
from sluice.streams.group_history.reading import read_history as read_group_history

# operations
from sluice.streams.group_history.sampler import SAMPLE_SECONDS

# articles, links
from sluice.streams.keys import Keys

# links
from sluice.streams.lock import RedisLock

# operations
from sluice.streams.maintenance import Status as MaintenanceStatus

# operations
from sluice.streams.maintenance import status as maintenance_status

# accounts, links
from sluice.streams.messages import (
    Cancelled,
    Delivery,
    Duplicate,
    Message,
    NoOutcome,
    PoisonMessage,
)

# accounts, links
from sluice.streams.outage import REDIS_DOWN

# accounts, links
from sluice.streams.spec import DeadLetterHook, GroupSpec

# links, reminders
from sluice.streams.waiting import cancel_and_wait, first_of, wait_or_stop

__all__ = [
    "APPS",
    "CLIENT_LIMITS",
    "COLUMNS",
    "CONFIG",
    "DUMMY_HASH",
    "EVENT_TYPES",
    "FORM",
    "HEAD_SQL",
    "HTML_PAGE",
    "JSON",
    "KEYS",
    "LIMIT_DEFAULT",
    "LIMIT_MAX",
    "LOGIN",
    "LOGIN_LIMITER",
    "MAX_FAILURES",
    "MAX_MINUTES",
    "NO_STORE",
    "PASSWORDS",
    "PUBLISHERS",
    "QUIET",
    "REDIS",
    "REDIS_DOWN",
    "REDIS_ERRORS",
    "REDIS_TIMEOUT",
    "REGISTER",
    "SAMPLE_SECONDS",
    "STORE",
    "TRACE_ID",
    "VISITOR_KEY",
    "WINDOW_SECONDS",
    "Caller",
    "CancelWatch",
    "Cancelled",
    "Claim",
    "ClaimantBusy",
    "CronError",
    "CronSchedule",
    "DeadLetter",
    "DeadLetterHook",
    "Delivery",
    "DeliveryView",
    "Doc",
    "Due",
    "Duplicate",
    "EngineProjection",
    "EventHandler",
    "EventPage",
    "EventQuery",
    "Failures",
    "Form",
    "FoundEvent",
    "GroupHistory",
    "GroupSpec",
    "HistorySize",
    "Invalid",
    "Keys",
    "LargeBody",
    "LoginLimiter",
    "MaintenanceStatus",
    "Message",
    "Network",
    "NoOutcome",
    "OneShotRunner",
    "Page",
    "Place",
    "PoisonMessage",
    "RedisLock",
    "SegmentRef",
    "Validators",
    "VisitorHasher",
    "by_account",
    "by_address",
    "cancel_and_wait",
    "catalog",
    "client_address",
    "client_host",
    "client_ip",
    "credentials",
    "decode",
    "deliveries",
    "email_key",
    "event_group",
    "event_search",
    "first_of",
    "forget_signal",
    "found",
    "held_by",
    "incoming_trace_id",
    "inline_hashes",
    "is_form",
    "list_dead_letters",
    "maintenance_status",
    "measure",
    "min_interval",
    "not_modified",
    "onward_page",
    "other_routes",
    "page",
    "parse_cron",
    "parse_dead_id",
    "password_page",
    "pause",
    "places_holding",
    "problem_response",
    "read_form",
    "read_group_history",
    "read_history",
    "redis_client",
    "redrive_matching",
    "refresh_topology",
    "requested_range",
    "shared_secret",
    "signal_cancel",
    "slot_groups",
    "token_hash",
    "trusted_networks",
    "visitor_hash",
    "wait_or_stop",
    "zone",
]
