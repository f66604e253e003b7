"""The OpenAPI 3.1 document of every route; body schemas come from the Structs in schemas.py."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from sluice.http.bodies import JSON, PROBLEM_JSON, json_response
from sluice.http.keys import CONFIG
from sluice.http.schemas import (
    VIEWER_MAX_LENGTH,
    ArticleViews,
    Health,
    Problem,
    Readiness,
    RegisterBody,
    TokenBody,
    TokenOut,
    TopArticles,
    UserOut,
    ViewBody,
    ViewCounted,
)
from sluice.streams.maintenance import Status

Doc = dict[str, Any]

_STRUCTS = (
    Health, Readiness, ViewBody, ViewCounted, ArticleViews, TopArticles, Problem,
    RegisterBody, UserOut, TokenBody, TokenOut, Status,
)  # fmt: skip
_REF = "#/components/schemas/{name}"


def _ref(name: str) -> Doc:
    return {"$ref": _REF.format(name=name)}


def _ok(schema: str, description: str) -> Doc:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


def _problem(description: str) -> Doc:
    return {"description": description, "content": {PROBLEM_JSON: {"schema": _ref("Problem")}}}


_ARTICLE_ID = {
    "name": "article_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
}
_BAD_ARTICLE_ID = _problem("the article id does not match ^[A-Za-z0-9_-]{1,64}$")
_USER: list[Doc] = [{"user": []}]
_ADMIN: list[Doc] = [{"admin": []}]
_BAD_BODY = {
    "400": _problem("malformed JSON, or a field of the wrong type"),
    "413": _problem("the body is larger than 64 KiB"),
    "415": _problem("the body is not application/json"),
}
_UNAUTHORIZED = _problem("missing, unknown or expired bearer token")
_FORBIDDEN = _problem("a user token where the admin token is required")


def _body(schema: str) -> Doc:
    return {"required": True, "content": {JSON: {"schema": _ref(schema)}}}


_PATHS: Doc = {
    "/healthz": {"get": {
        "operationId": "healthz",
        "summary": "Liveness: 200 while the process runs",
        "responses": {"200": _ok("Health", "the process is up")},
    }},
    "/readyz": {"get": {
        "operationId": "readyz",
        "summary": "Readiness: the database and Redis answer",
        "responses": {
            "200": _ok("Readiness", "both dependencies answer"),
            "503": _problem("a dependency does not answer; `checks` says which"),
        },
    }},
    "/openapi.json": {"get": {
        "operationId": "openapi",
        "summary": "This document",
        "responses": {"200": {"description": "the OpenAPI document",
                              "content": {JSON: {"schema": {"type": "object"}}}}},
    }},
    "/v1/articles/top": {"get": {
        "operationId": "topArticles",
        "summary": "The current period's most viewed articles, highest first",
        "parameters": [
            {"name": "period", "in": "query", "required": False,
             "schema": {"enum": ["day", "week", "month"], "default": "day"}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}},
        ],
        "responses": {
            "200": _ok("TopArticles", "the leaderboard; `start` is the period's first day"),
            "422": _problem("unknown period or a limit outside 1..100"),
        },
    }},
    "/v1/articles/{article_id}": {"get": {
        "operationId": "getArticle",
        "summary": "An article's total views (0 if never viewed)",
        "parameters": [_ARTICLE_ID],
        "responses": {"200": _ok("ArticleViews", "the total"), "422": _BAD_ARTICLE_ID},
    }},
    "/v1/articles/{article_id}/views": {"post": {
        "operationId": "postView",
        "summary": "Count a view, once per viewer within the dedupe window",
        "description": (
            "The viewer is `viewer` from the body, else a keyed hash of client IP and "
            "User-Agent. The body is optional."
        ),
        "parameters": [_ARTICLE_ID],
        "requestBody": {"required": False, "content": {JSON: {"schema": _ref("ViewBody")}}},
        "responses": {
            "202": _ok("ViewCounted", "`counted` is false for a viewer already counted"),
            "400": _problem("malformed JSON, or a field of the wrong type"),
            "413": _problem("the body is larger than 64 KiB"),
            "415": _problem("the body is not application/json"),
            "422": _problem(
                f"invalid article id, or a viewer not 1 to {VIEWER_MAX_LENGTH} characters"
            ),
            "503": _problem("the database is unavailable; nothing was counted"),
        },
    }},
    "/v1/users": {"post": {
        "operationId": "register",
        "summary": "Register; the welcome mail is sent in the background, exactly once",
        "requestBody": _body("RegisterBody"),
        "responses": {
            "201": _ok("UserOut", "the new user"),
            **_BAD_BODY,
            "409": _problem("the email is taken (compared case-insensitively)"),
            "422": _problem("missing or invalid email, password not 8 to 128 characters"),
        },
    }},
    "/v1/tokens": {"post": {
        "operationId": "login",
        "summary": "Exchange email and password for a bearer token",
        "requestBody": _body("TokenBody"),
        "responses": {
            "201": _ok("TokenOut", "the token and its expiry"),
            **_BAD_BODY,
            "401": _problem("unknown email or wrong password (the same answer for both)"),
            "422": _problem("email or password missing"),
            "429": _problem("5 failed logins for this email within 15 minutes; see Retry-After"),
        },
    }},
    "/v1/tokens/current": {"delete": {
        "operationId": "logout",
        "summary": "Revoke the token this request carries",
        "security": _USER,
        "responses": {"204": {"description": "the token no longer works"},
                      "401": _UNAUTHORIZED},
    }},
    "/v1/me": {"get": {
        "operationId": "me",
        "summary": "The authenticated user",
        "security": _USER,
        "responses": {"200": _ok("UserOut", "the user"), "401": _UNAUTHORIZED},
    }},
    "/v1/admin/streams": {"get": {
        "operationId": "adminStreams",
        "summary": "Streams, groups, pending, lag, dead letters, relay backlog",
        "security": _ADMIN,
        "responses": {
            "200": _ok("Status", "the state of the streams"),
            "401": _UNAUTHORIZED,
            "403": _FORBIDDEN,
            "503": _problem("Redis does not answer"),
        },
    }},
}  # fmt: skip


def build_document(base_url: str) -> Doc:
    """The document for a service reachable at ``base_url``."""
    _, schemas = msgspec.json.schema_components(_STRUCTS, ref_template=_REF)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sluice",
            "version": "1.0.0",
            "description": "Event-sourced short links, view counts and scheduled work.",
        },
        "servers": [{"url": base_url}],
        "paths": _PATHS,
        "components": {
            "schemas": schemas,
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
    return json_response(build_document(request.app[CONFIG].base_url))
