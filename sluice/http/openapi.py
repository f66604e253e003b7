"""The OpenAPI 3.1 document, assembled from the routes: each module of views declares its
routes beside them (``apidoc.Route``), and ``routes_of`` joins them, sluice's and the
apps' (``sluice.app``), in the order the router registers them, so what is routed and
what is documented come from one declaration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from sluice.http import docs_page, health, metrics_route, task_controls, task_routes
from sluice.http.app_keys import APPS, CONFIG
from sluice.http.bodies import JSON, json_response
from sluice.http.route_docs import ADMIN, RETRY_AFTER, SCHEMA_REF, Doc, Route, problem, too_many
from sluice.http.schemas import Problem

if TYPE_CHECKING:
    from sluice.app.loading import Apps

_UNAVAILABLE = problem(
    "the database or Redis is unavailable and the route has no fallback (the database"
    " down or restarting, locked past its busy timeout, an I/O error, a full disk; Redis"
    " not answering)"
)
_RETRY_AFTER = {"Retry-After": RETRY_AFTER}


def _unavailable(path: str, documented: Doc | None) -> Doc:
    """The 503 of an operation: its own words if it has some, and (readiness aside, which
    reports rather than refuses) ``Retry-After``."""
    answer = dict(documented or _UNAVAILABLE)
    if path != "/readyz":
        answer["headers"] = {**answer.get("headers", {}), **_RETRY_AFTER}
    return answer


def _with_unavailable(paths: Doc) -> Doc:
    """Every operation may answer 503 when a dependency fails (the request middleware);
    operations that say more about it keep their own description."""
    return {
        path: {
            method: {
                **op,
                "responses": {
                    **op["responses"],
                    "503": _unavailable(path, op["responses"].get("503")),
                },
            }
            for method, op in operations.items()
        }
        for path, operations in paths.items()
    }


_ADMIN_LIMITED = too_many(
    "this client address failed admin authentication too often"
    " (SLUICE_ADMIN_FAILURES_PER_CLIENT per window): a wrong token is refused until"
    " Retry-After; the right one always passes"
)
_BODY_TOO_SLOW = problem(
    "the body did not arrive within SLUICE_BODY_TIMEOUT_SECONDS; the connection closes"
    " after this answer"
)


def _limited(op: Doc) -> Doc:
    """An operation with the answers of the abuse limits (docs/guides/security.md): 429 behind the
    admin token (failed admin authentications are limited per client address), 408 wherever a body
    is taken (the middleware reads it first, under SLUICE_BODY_TIMEOUT_SECONDS)."""
    extra = {"429": _ADMIN_LIMITED} if op.get("security") == ADMIN else {}
    if "requestBody" in op or "413" in op["responses"]:
        extra["408"] = _BODY_TOO_SLOW
    return {**op, "responses": {**op["responses"], **extra}} if extra else op


def _with_limits(paths: Doc) -> Doc:
    return {
        path: {method: _limited(op) for method, op in operations.items()}
        for path, operations in paths.items()
    }


# The core's groups of operations (/docs draws one section each): "service" first, then
# those the apps declare (``App.tag``), "admin", and a group for each app's own routes.
SERVICE, ADMIN_TAG = "service", "admin"
TAGS = {
    SERVICE: "Health, metrics, this document and its page",
    ADMIN_TAG: "Operations, with the admin token: streams, dead letters, groups, events,"
    " traces, the history, tasks, jobs, orphan visits",
}


def _tag(path: str) -> str:
    return ADMIN_TAG if path.startswith("/v1/admin/") else SERVICE


def _with_tags(paths: Doc) -> Doc:
    """Each operation in its group (``TAGS``), unless it names its own."""
    return {
        path: {method: {"tags": [_tag(path)], **op} for method, op in operations.items()}
        for path, operations in paths.items()
    }


def _paths(routes: Iterable[Route]) -> Doc:
    """One path item per path, holding the operations of every method routed there."""
    paths: Doc = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = route.doc
    return paths


def _schemas(routes: Iterable[Route]) -> Doc:
    """The schemas the routes' Structs need (the ones they nest included), and ``Problem``,
    which every operation may answer (the 503 above)."""
    structs = dict.fromkeys((Problem, *(struct for route in routes for struct in route.structs)))
    _, schemas = msgspec.json.schema_components(tuple(structs), ref_template=SCHEMA_REF)
    return schemas


def routes_of(apps: Apps) -> tuple[Route, ...]:
    """Every route, in the router's order: the core's, then the apps' (each app's in its
    own order), then the apps' routes whose path starts with a variable (the links app's
    ``/{code}``), which must shadow no other route."""
    catch_all = tuple(route for route in apps.routes if route.path.startswith("/{"))
    return (*ROUTES, *(r for r in apps.routes if r not in catch_all), *catch_all)


def build_document(base_url: str, apps: Apps) -> Doc:
    """The document for a service reachable at ``base_url`` running ``apps``: every
    route, each app's in a group (tag) of its own."""
    routes = routes_of(apps)
    tags = {SERVICE: TAGS[SERVICE]}
    for app in apps.apps:
        tags.update({name: text for name, text in app.tags.items() if name not in TAGS})
    tags[ADMIN_TAG] = TAGS[ADMIN_TAG]
    for app in apps.apps:
        tags.setdefault(app.name, app.description)
    used = {tag for route in routes for tag in route.doc.get("tags", [_tag(route.path)])}
    tags = {name: text for name, text in tags.items() if name in used}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sluice",
            "version": "1.0.0",
            "description": "Event-sourced short links, view counts and scheduled work.",
        },
        "servers": [{"url": base_url}],
        "tags": [{"name": name, "description": text} for name, text in tags.items()],
        "paths": _with_tags(_with_unavailable(_with_limits(_paths(routes)))),
        "components": {
            "schemas": _schemas(routes),
            "securitySchemes": {
                "user": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from POST /v1/tokens",
                },
                "admin": {"type": "http", "scheme": "bearer", "description": "SLUICE_ADMIN_TOKEN"},
            },
        },
    }


async def openapi_view(request: web.Request) -> web.Response:
    return json_response(build_document(request.app[CONFIG].base_url, request.app[APPS]))


# The core's routes, in the router's order; the apps' follow (``routes_of``).
ROUTES: tuple[Route, ...] = (
    *health.ROUTES,
    Route(
        "GET",
        "/openapi.json",
        openapi_view,
        {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {
                "200": {
                    "description": "the OpenAPI document",
                    "content": {JSON: {"schema": {"type": "object"}}},
                }
            },
        },
    ),
    *metrics_route.ROUTES,
    *docs_page.ROUTES,
    *task_routes.ROUTES,
    *task_controls.ROUTES,
)
