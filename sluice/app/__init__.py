"""The public app API: put your own domain on sluice with the guarantees it gives its own.

An app declares, on an ``App`` object its package builds at import time::

    from sluice.app import App, Event, HandlerContext, Tx

    app = App("orders")
    app.aggregate("orders", key="order_id")

    @app.event
    class OrderPaid(Event, frozen=True, kw_only=True, tag=True):
        aggregate: ClassVar[str] = "orders"
        order_id: str

    loyalty = app.group("loyalty", max_deliveries=8)

    @loyalty.once(OrderPaid)
    async def credit_points(event: OrderPaid, tx: Tx, ctx: HandlerContext) -> None:
        ...  # written once, whatever the redeliveries

and is run by naming it in ``SLUICE_APPS`` (or by installing a package that names it
under the ``sluice.apps`` entry points). Every name below is the API: what is not in
``__all__`` may change between releases. ``docs/guides/write-an-app.md`` walks through
the example app (``examples/orders``); ``sluice.app.testing`` helps test one.
"""

from __future__ import annotations

from sluice.app.adoption import Adoption, AdoptionRefused, adopt_history
from sluice.app.aggregates import (
    Aggregate,
    VersionConflict,
    applies,
    retry_on_conflict,
    save_all,
)
from sluice.app.contexts import HandlerContext, JobContext, ProjectionContext
from sluice.app.declare import App
from sluice.app.groups import Group, GroupSettings, Projection
from sluice.app.jobs import Job
from sluice.app.redis_keys import RedisKeys
from sluice.app.settings import Settings
from sluice.app.web import config, redis, store, trace_id
from sluice.config import Config
from sluice.errors import (
    ConfigError,
    Conflict,
    DependencyDown,
    FieldError,
    Forbidden,
    Gone,
    HandlerError,
    NotFound,
    ServiceUnavailable,
    SluiceError,
    TooManyRequests,
    Unauthorized,
    Unprocessable,
    UnsupportedMediaType,
)
from sluice.events import Event, new_trace_id, utcnow, uuid7
from sluice.events.registry import Payload
from sluice.flow.slots import Slots
from sluice.flow.spec import Flow, Rate
from sluice.http.auth import (
    bearer_token,
    optional_user,
    require_admin,
    require_user,
    require_user_or_admin,
)
from sluice.http.bodies import json_response, parse_limit, query_limit, read_json
from sluice.http.route_docs import (
    ADMIN,
    BAD_BODY,
    FORBIDDEN,
    UNAUTHORIZED,
    USER,
    Route,
    html_page,
    limit_query,
    ok,
    problem,
    ref,
    request_body,
    token_query,
    too_many,
)
from sluice.process.resources import Resources
from sluice.scheduler.task_spec import TaskContext
from sluice.store import Store, Tx
from sluice.store.base import Row
from sluice.store.users import User, db_time, from_db_time, optional_db_time, user_by_id
from sluice.streams.messages import Cancelled, Duplicate, NotYet

__all__ = [
    "ADMIN",
    "BAD_BODY",
    "FORBIDDEN",
    "UNAUTHORIZED",
    "USER",
    "Adoption",
    "AdoptionRefused",
    "Aggregate",
    "App",
    "Cancelled",
    "Config",
    "ConfigError",
    "Conflict",
    "DependencyDown",
    "Duplicate",
    "Event",
    "FieldError",
    "Flow",
    "Forbidden",
    "Gone",
    "Group",
    "GroupSettings",
    "HandlerContext",
    "HandlerError",
    "Job",
    "JobContext",
    "NotFound",
    "NotYet",
    "Payload",
    "Projection",
    "ProjectionContext",
    "Rate",
    "RedisKeys",
    "Resources",
    "Route",
    "Row",
    "ServiceUnavailable",
    "Settings",
    "Slots",
    "SluiceError",
    "Store",
    "TaskContext",
    "TooManyRequests",
    "Tx",
    "Unauthorized",
    "Unprocessable",
    "UnsupportedMediaType",
    "User",
    "VersionConflict",
    "adopt_history",
    "applies",
    "bearer_token",
    "config",
    "db_time",
    "from_db_time",
    "html_page",
    "json_response",
    "limit_query",
    "new_trace_id",
    "ok",
    "optional_db_time",
    "optional_user",
    "parse_limit",
    "problem",
    "query_limit",
    "read_json",
    "redis",
    "ref",
    "request_body",
    "require_admin",
    "require_user",
    "require_user_or_admin",
    "retry_on_conflict",
    "save_all",
    "store",
    "token_query",
    "too_many",
    "trace_id",
    "user_by_id",
    "utcnow",
    "uuid7",
]
