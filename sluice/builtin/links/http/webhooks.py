"""The caller's webhooks (docs/guides/links.md): create (the secret shown once), list, delete, and
the attempts of one. Delivery is the ``webhooks`` group's
(``sluice.builtin.links.webhooks.group``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec
from aiohttp import web

from sluice.app import (
    BAD_BODY,
    UNAUTHORIZED,
    USER,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    config,
    db_time,
    from_db_time,
    json_response,
    ok,
    problem,
    query_limit,
    read_json,
    request_body,
    require_user,
    store,
    utcnow,
    uuid7,
)
from sluice.builtin.links.rules import Invalid, short_origin
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.webhooks import repository
from sluice.builtin.links.webhooks.payloads import TYPES
from sluice.builtin.links.webhooks.repository import ATTEMPTS_SHOWN, DeliveryRow, Webhook
from sluice.builtin.links.webhooks.signing import BadSecret, generate_secret, secret_key
from sluice.builtin.links.webhooks.targets import check_target

DELIVERIES_DEFAULT = 50


class WebhookBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(examples=["https://example.org/hooks/sluice"])] | None = None
    events: list[str] | None = None
    secret: Annotated[str, msgspec.Meta(description="whsec_ + base64 of 24 to 64 bytes")] | None = (
        None
    )


class WebhookOut(msgspec.Struct, kw_only=True):
    id: str
    url: str
    events: list[str]
    created_at: datetime


class WebhookCreated(msgspec.Struct, kw_only=True):
    id: str
    url: str
    events: list[str]
    created_at: datetime
    secret: str  # shown this once: keep it to verify signatures


class WebhookList(msgspec.Struct, kw_only=True):
    items: list[WebhookOut]


class WebhookDelivery(msgspec.Struct, kw_only=True):
    at: datetime
    event_type: str
    message_id: str  # the webhook-id header, the same on every attempt of one message
    attempt: int
    status: int | None  # the endpoint's HTTP status; none when no answer came
    error: str | None  # why no answer came (timeout, refused address, connection)
    duration_ms: float


class WebhookDeliveryList(msgspec.Struct, kw_only=True):
    items: list[WebhookDelivery]


def _out(hook: Webhook) -> WebhookOut:
    return WebhookOut(
        id=hook.id, url=hook.url, events=list(hook.events), created_at=from_db_time(hook.created_at)
    )


def _delivery(row: DeliveryRow) -> WebhookDelivery:
    return WebhookDelivery(
        at=from_db_time(row.at),
        event_type=row.event_type,
        message_id=row.message_id,
        attempt=row.attempt,
        status=row.status,
        error=row.error,
        duration_ms=row.duration_ms,
    )


def _events(value: list[str] | None, errors: list[FieldError]) -> tuple[str, ...]:
    wanted = tuple(dict.fromkeys(value or ()))
    unknown = [e for e in wanted if e not in TYPES]
    if not wanted or unknown:
        named = f"unknown {', '.join(map(repr, unknown))}; " if unknown else ""
        errors.append(FieldError("events", f"{named}a non-empty list of {', '.join(TYPES)}"))
    return wanted


def _validated(request: web.Request, body: WebhookBody) -> tuple[str, tuple[str, ...], str]:
    deployment = config(request)
    errors: list[FieldError] = []
    url = ""
    try:
        url = check_target(
            body.url or "",
            short_origin(deployment.base_url),
            bool(LinksSettings.of(deployment).webhook_allow_private),
        )
    except Invalid as exc:
        errors.append(FieldError("url", str(exc)))
    events = _events(body.events, errors)
    secret = body.secret if body.secret is not None else generate_secret()
    try:
        secret_key(secret)
    except BadSecret as exc:
        errors.append(FieldError("secret", str(exc)))
    if errors:
        raise Unprocessable("invalid webhook", errors)
    return url, events, secret


def _over_cap(limit: int) -> Unprocessable:
    message = f"you have {limit} webhooks, the most allowed (SLUICE_WEBHOOKS_PER_USER); delete one"
    return Unprocessable("too many webhooks", [FieldError("webhooks", message)])


async def create_webhook(request: web.Request) -> web.Response:
    user = await require_user(request)
    body = await read_json(request, WebhookBody)
    url, events, secret = _validated(request, body)
    limit = LinksSettings.of(request).webhooks_per_user
    hook = Webhook(
        id=uuid7(),
        owner_id=user.id,
        url=url,
        events=events,
        secret=secret,
        created_at=db_time(utcnow()),
    )
    async with store(request).transaction() as tx:
        await tx.serialize(f"webhooks:{user.id}")  # two creations at once count each other
        if await repository.count_of(tx, user.id) >= limit:
            raise _over_cap(limit)
        await repository.insert(tx, hook)
    out = _out(hook)
    created = WebhookCreated(
        id=out.id, url=out.url, events=out.events, created_at=out.created_at, secret=secret
    )
    return json_response(created, 201, headers={"Location": f"/v1/webhooks/{hook.id}"})


async def list_webhooks(request: web.Request) -> web.Response:
    user = await require_user(request)
    hooks = await repository.of_owner(store(request), user.id)
    return json_response(WebhookList(items=[_out(h) for h in hooks]))


async def delete_webhook(request: web.Request) -> web.Response:
    user = await require_user(request)
    webhook_id = request.match_info["id"]
    if not await repository.delete(store(request), webhook_id, user.id):
        raise NotFound(f"you have no webhook {webhook_id!r}")
    return web.Response(status=204)


async def list_deliveries(request: web.Request) -> web.Response:
    user = await require_user(request)
    webhook_id = request.match_info["id"]
    limit = query_limit(request, DELIVERIES_DEFAULT, ATTEMPTS_SHOWN)
    db = store(request)
    if await repository.get(db, webhook_id, user.id) is None:
        raise NotFound(f"you have no webhook {webhook_id!r}")
    rows = await repository.attempts(db, webhook_id, limit)
    return json_response(WebhookDeliveryList(items=[_delivery(r) for r in rows]))


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_NO_HOOK = problem("no such webhook, or another user's (the same answer for both)")

ROUTES = (
    Route(
        "POST",
        "/v1/webhooks",
        create_webhook,
        {
            "operationId": "createWebhook",
            "summary": "A webhook: your links' events, signed the Standard Webhooks way",
            "description": (
                "`url`: http or https, the rules of a link's URL, and not a private, loopback or "
                "link-local address (unless SLUICE_WEBHOOK_ALLOW_PRIVATE=1; names are checked "
                "again when resolved, at each delivery). `events`: a non-empty subset of "
                f"{', '.join(f'`{t}`' for t in TYPES)}. `secret`: `whsec_` + base64 of 24 to 64 "
                "bytes; generated when left out. The answer shows the secret this once. At most "
                "SLUICE_WEBHOOKS_PER_USER (10) webhooks per user."
            ),
            "security": USER,
            "requestBody": request_body(WebhookBody),
            "responses": {
                "201": ok(WebhookCreated, "the new webhook, with its secret (shown this once)"),
                **BAD_BODY,
                "401": UNAUTHORIZED,
                "422": problem(
                    "bad or private url, events empty or unknown, a secret not in the "
                    "whsec_ form, or the most webhooks a user may have already"
                ),
            },
        },
        structs=(WebhookBody, WebhookCreated),
    ),
    Route(
        "GET",
        "/v1/webhooks",
        list_webhooks,
        {
            "operationId": "listWebhooks",
            "summary": "The caller's webhooks, oldest first (no secrets)",
            "security": USER,
            "responses": {"200": ok(WebhookList, "the caller's webhooks"), "401": UNAUTHORIZED},
        },
        structs=(WebhookList,),
    ),
    Route(
        "DELETE",
        "/v1/webhooks/{id}",
        delete_webhook,
        {
            "operationId": "deleteWebhook",
            "summary": "Delete a webhook and its delivery records; nothing more is sent to it",
            "security": USER,
            "parameters": [_ID],
            "responses": {"204": {"description": "deleted"}, "401": UNAUTHORIZED, "404": _NO_HOOK},
        },
    ),
    Route(
        "GET",
        "/v1/webhooks/{id}/deliveries",
        list_deliveries,
        {
            "operationId": "listWebhookDeliveries",
            "summary": "The webhook's delivery attempts, newest first",
            "description": f"The last {ATTEMPTS_SHOWN} at most (`limit`, default "
            f"{DELIVERIES_DEFAULT}); each with its HTTP status or error.",
            "security": USER,
            "parameters": [
                _ID,
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": ATTEMPTS_SHOWN},
                },
            ],
            "responses": {
                "200": ok(WebhookDeliveryList, "the attempts"),
                "401": UNAUTHORIZED,
                "404": _NO_HOOK,
                "422": problem(f"limit not an integer from 1 to {ATTEMPTS_SHOWN}"),
            },
        },
        structs=(WebhookDeliveryList,),
    ),
)
