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

from sluice.app.contexts import HandlerContext, JobContext, ProjectionContext
from sluice.app.declare import App
from sluice.app.groups import Group, GroupSettings, Projection
from sluice.app.jobs import Job
from sluice.app.redis_keys import RedisKeys
from sluice.app.settings import Settings
from sluice.app.web import config, redis, store, trace_id
from sluice.config import Config
from sluice.errors import (
    Conflict,
    DependencyDown,
    FieldError,
    Forbidden,
    NotFound,
    Unauthorized,
    Unprocessable,
)
from sluice.event_registry import Payload
from sluice.events import Event, new_trace_id, utcnow, uuid7
from sluice.http.apidoc import (
    ADMIN,
    BAD_BODY,
    FORBIDDEN,
    UNAUTHORIZED,
    USER,
    ok,
    problem,
    ref,
    request_body,
)
from sluice.http.auth import optional_user, require_admin, require_user
from sluice.http.bodies import json_response, parse_limit, read_json
from sluice.resources import Resources
from sluice.scheduler.tasks import TaskContext
from sluice.store import Store, Tx
from sluice.store.users import User

__all__ = [
    "ADMIN",
    "BAD_BODY",
    "FORBIDDEN",
    "UNAUTHORIZED",
    "USER",
    "App",
    "Config",
    "Conflict",
    "DependencyDown",
    "Event",
    "FieldError",
    "Forbidden",
    "Group",
    "GroupSettings",
    "HandlerContext",
    "Job",
    "JobContext",
    "NotFound",
    "Payload",
    "Projection",
    "ProjectionContext",
    "RedisKeys",
    "Resources",
    "Settings",
    "Store",
    "TaskContext",
    "Tx",
    "Unauthorized",
    "Unprocessable",
    "User",
    "config",
    "json_response",
    "new_trace_id",
    "ok",
    "optional_user",
    "parse_limit",
    "problem",
    "read_json",
    "redis",
    "ref",
    "request_body",
    "require_admin",
    "require_user",
    "store",
    "trace_id",
    "utcnow",
    "uuid7",
]
