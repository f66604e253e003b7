"""problem+json documents (RFC 9457) for every error the API answers."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from sluice.errors import FieldError
from sluice.http.bodies import PROBLEM_JSON, json_response
from sluice.http.schemas import Problem

VALIDATION_TYPE = "https://sluice.dev/problems/validation"

NOSNIFF = {"X-Content-Type-Options": "nosniff"}
# Headers of an aiohttp HTTPException worth keeping on the problem answer (405's Allow).
_KEPT_HEADERS = ("Allow", "Retry-After", "Location")


def problem_response(
    status: int,
    detail: str,
    *,
    title: str | None = None,
    errors: list[FieldError] | None = None,
    checks: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An ``application/problem+json`` response of ``status`` with ``detail`` (field
    ``errors`` make it a validation problem), sent with ``nosniff``."""
    problem = Problem(
        type=VALIDATION_TYPE if errors else "about:blank",
        title=title or HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        errors=errors or None,
        checks=checks,
    )
    # The detail may quote the request (a path, a field); a browser sniffing the answer
    # as HTML would run what the client wrote into it.
    headers = {**headers, **NOSNIFF} if headers else NOSNIFF
    return json_response(problem, status, content_type=PROBLEM_JSON, headers=headers)


def from_http_exception(request: web.Request, exc: web.HTTPException) -> web.Response:
    """The problem+json twin of one of aiohttp's own error answers (404, 405, 413...)."""
    if isinstance(exc, web.HTTPNotFound):
        detail = f"no resource at {request.path}"
    elif isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        detail = f"{request.method} is not allowed on {request.path}; allowed: {allowed}"
    elif exc.text and exc.text != f"{exc.status}: {exc.reason}":
        detail = exc.text
    else:
        detail = exc.reason
    headers = {name: exc.headers[name] for name in _KEPT_HEADERS if name in exc.headers}
    return problem_response(exc.status, detail, title=exc.reason, headers=headers)
