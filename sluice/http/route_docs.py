"""How a route describes itself: ``Route`` puts a view beside its OpenAPI operation, so the
router and the document (``openapi.py``) come from one declaration; and the pieces many
operations share, so each says the same thing the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp.typedefs import Handler

from sluice.http.bodies import JSON, PROBLEM_JSON
from sluice.http.body_limits import LargeBody
from sluice.http.schemas import Problem

# A piece of an OpenAPI document, as the JSON it is written as.
Doc = dict[str, Any]

SCHEMA_REF = "#/components/schemas/{name}"


@dataclass(frozen=True)
class Route:
    """``view`` at ``method`` ``path`` (a GET answers HEAD too, unless the path declares
    a HEAD of its own); ``doc`` is its OpenAPI operation and ``structs`` the types its
    ``$ref``s name, Structs or dataclasses (``Problem`` is always in the document);
    ``large_body``: the route takes a body larger than 64 KiB, read only once the
    caller was admitted (``sluice.http.body_limits``)."""

    method: str
    path: str
    view: Handler
    doc: Doc
    structs: tuple[type, ...] = ()
    large_body: LargeBody | None = None


def ref(struct: type) -> Doc:
    """A ``$ref`` to the schema of the msgspec struct ``struct``, for a schema nested in
    another (an array's items, a property)."""
    return {"$ref": SCHEMA_REF.format(name=struct.__name__)}


def ok(struct: type, description: str) -> Doc:
    """An OpenAPI response answered as JSON of the msgspec struct ``struct``:
    ``{"200": ok(Order, "the order")}`` in a route's ``responses``."""
    return {"description": description, "content": {JSON: {"schema": ref(struct)}}}


def problem(description: str) -> Doc:
    """An OpenAPI response answered as problem+json, described by ``description``:
    ``{"404": problem("no such order")}`` in a route's ``responses``."""
    return {"description": description, "content": {PROBLEM_JSON: {"schema": ref(Problem)}}}


RETRY_AFTER = {
    "description": "seconds to wait before trying again",
    "schema": {"type": "integer", "minimum": 1},
}


def too_many(description: str) -> Doc:
    """A 429, which always says when to try again."""
    return {**problem(description), "headers": {"Retry-After": RETRY_AFTER}}


def request_body(struct: type) -> Doc:
    """An OpenAPI request body: JSON of the msgspec struct ``struct`` (its schema is
    added to the document's components)."""
    return {"required": True, "content": {JSON: {"schema": ref(struct)}}}


# The media type of an HTML form's body, for a ``requestBody``'s ``content``.
FORM = "application/x-www-form-urlencoded"
# A response's ``content`` when it is an HTML page.
HTML_PAGE = {"text/html": {"schema": {"type": "string"}}}


def html_page(description: str) -> Doc:
    """A response that is an HTML page (a view answering a browser)."""
    return {"description": description, "content": HTML_PAGE}


def limit_query(default: int, maximum: int) -> Doc:
    """The ``limit`` query parameter of a list, as ``query_limit`` reads it: an integer
    from 1 to ``maximum``, ``default`` when absent."""
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": maximum, "default": default},
    }


def token_query(description: str) -> Doc:
    """The ``token`` of a link sluice mailed."""
    return {
        "name": "token",
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


# A route's ``security``: a user's bearer token.
USER: list[Doc] = [{"user": []}]
# A route's ``security``: the admin token.
ADMIN: list[Doc] = [{"admin": []}]
# The answers every route that reads a JSON body may give (400, 413, 415), to merge
# into its ``responses``: ``{**BAD_BODY, "201": ok(...)}``.
BAD_BODY = {
    "400": problem("malformed JSON, or a field of the wrong type"),
    "413": problem("the body is larger than 64 KiB"),
    "415": problem("the body is not application/json"),
}
# The 401 of a route that needs a token, for its ``responses``.
UNAUTHORIZED = problem("missing, unknown or expired bearer token")
# The 403 of an admin route called with a user's token, for its ``responses``.
FORBIDDEN = problem("a user token where the admin token is required")
