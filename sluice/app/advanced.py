"""Advanced hooks: the lower-level parts of the engine the built-in apps stand on.

``sluice.app`` is what a team's app needs; this module is what only an app reaching
into the engine's own machinery does: the redirect fast path's wire helpers, the
dead letters' messages, the operations records (deliveries, dead letters,
pauses, group history), the event history's reader and search, the keys of the API
process's state, Redis topology and the cron parser. It is public and versioned like
the rest of ``sluice.app`` (a name here changes only with a release note and an upgrade
path), but lower-level: these names follow the engine's layout and carry fewer
guarantees of convenience. The comment above each import names the built-in apps that
use it (docs/reference/app-api.md lists them from there); the built-in apps import
nothing else of sluice but ``sluice.app`` and this module (an import-linter contract
holds it). The names are the engine's own, re-exported; the documentation of each is
its docstring there (a value's: the comment above its assignment).
"""

from __future__ import annotations

# links
from sluice.aio.lock import RedisLock

# accounts, links
from sluice.aio.outage import REDIS_DOWN

# links, reminders
from sluice.aio.waiting import cancel_and_wait, first_of, wait_or_stop

# links
from sluice.config.networks import Network, trusted_networks

# links, operations, reminders
from sluice.events import EVENT_TYPES, decode

# operations
from sluice.flow.view import FlowStatus, WaitingPage, flow_status, group_flows, waiting_entries

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
    SavedVersion,
    found,
)

# operations
from sluice.history.size import HistorySize, measure

# accounts, articles, links, operations, reminders
from sluice.http.app_keys import (
    APPS,
    CLIENT_LIMITS,
    KEYS,
    LOGIN_LIMITER,
    PASSWORDS,
    PUBLISHERS,
    QUIET,
    VISITOR_KEY,
)

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

# links
from sluice.http.login_limit import MAX_FAILURES, WINDOW_SECONDS, LoginLimiter

# links
from sluice.http.middlewares import incoming_trace_id

# accounts, links, reminders
from sluice.http.pages import Form, is_form, onward_page, page, password_page, read_form

# links
from sluice.http.problems import problem_response

# accounts, links, operations, reminders
from sluice.http.route_docs import FORM, HTML_PAGE, Doc

# operations
from sluice.http.static_page import Page, inline_hashes

# articles, links
from sluice.http.visitors import VisitorHasher, visitor_hash

# links
from sluice.process.resources import redis_client

# operations
from sluice.records import deliveries, pause

# operations
from sluice.records.attempts import DeliveryView

# links
from sluice.records.cancel import CancelWatch, forget_signal, signal_cancel

# operations
from sluice.records.dead_letters import (
    DeadLetter,
    Place,
    held_by,
    list_dead_letters,
    parse_dead_id,
    places_holding,
    redrive_matching,
)

# operations
from sluice.records.group_history.buckets import MAX_MINUTES

# operations
from sluice.records.group_history.reading import History as GroupHistory

# operations
from sluice.records.group_history.reading import read_history as read_group_history

# operations
from sluice.records.group_history.sampler import SAMPLE_SECONDS

# operations
from sluice.records.maintenance import Status as MaintenanceStatus

# operations
from sluice.records.maintenance import status as maintenance_status

# links, reminders
from sluice.redis_client.cluster import refresh_topology, slot_groups

# reminders
from sluice.scheduler.cron import CronError, CronSchedule, min_interval, parse_cron, zone

# reminders
from sluice.scheduler.one_shots import Due, OneShotRunner

# accounts, links
from sluice.security.passwords import DUMMY_HASH, Claim, ClaimantBusy, by_account, by_address

# accounts
from sluice.store.secrets import shared_secret

# accounts
from sluice.store.users import credentials, email_key, token_hash

# articles, links
from sluice.streams.engine_keys import Keys

# operations
from sluice.streams.failures import Failures

# links
from sluice.streams.messages import Message, NoOutcome, PoisonMessage

# links
from sluice.telemetry import tracing

# links
from sluice.telemetry.redirect_span import RedirectSpan

__all__ = [
    "APPS",
    "CLIENT_LIMITS",
    "COLUMNS",
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
    "REDIS_DOWN",
    "REDIS_ERRORS",
    "REDIS_TIMEOUT",
    "REGISTER",
    "SAMPLE_SECONDS",
    "VISITOR_KEY",
    "WINDOW_SECONDS",
    "Caller",
    "CancelWatch",
    "Claim",
    "ClaimantBusy",
    "CronError",
    "CronSchedule",
    "DeadLetter",
    "DeliveryView",
    "Doc",
    "Due",
    "EventPage",
    "EventQuery",
    "Failures",
    "FlowStatus",
    "Form",
    "FoundEvent",
    "GroupHistory",
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
    "RedirectSpan",
    "RedisLock",
    "SavedVersion",
    "SegmentRef",
    "Validators",
    "VisitorHasher",
    "WaitingPage",
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
    "event_search",
    "first_of",
    "flow_status",
    "forget_signal",
    "found",
    "group_flows",
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
    "tracing",
    "trusted_networks",
    "visitor_hash",
    "wait_or_stop",
    "waiting_entries",
    "zone",
]
