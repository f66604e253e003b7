"""The few exception types sluice raises; the HTTP layer maps them to problem+json."""

from __future__ import annotations

from dataclasses import dataclass, field


class SluiceError(Exception):
    """Base of every error sluice raises on purpose."""


class ConfigError(SluiceError):
    """The configuration cannot be used."""


@dataclass(frozen=True)
class FieldError:
    """One field of a request body and what is wrong with it: an entry of a 400's or a
    422's ``errors``."""

    field: str
    message: str


class ProblemError(SluiceError):
    """An error with an HTTP meaning: status, title and optional field errors."""

    status = 500
    title = "Internal Server Error"

    def __init__(
        self,
        detail: str,
        errors: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}


class BadRequest(ProblemError):
    status = 400
    title = "Bad Request"


class Unauthorized(ProblemError):
    """401: no credentials, or wrong ones; ``detail`` says which."""

    status = 401
    title = "Unauthorized"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="sluice"'})


class Forbidden(ProblemError):
    """403: the caller is known but may not do this."""

    status = 403
    title = "Forbidden"


class NotFound(ProblemError):
    """404: no such resource, or one the caller may not see (answer both alike, so an
    id of someone else's does not show that it exists)."""

    status = 404
    title = "Not Found"


class Conflict(ProblemError):
    """409: the request clashes with the resource's current state (a name taken, a
    version moved on, a run already in progress)."""

    status = 409
    title = "Conflict"


class Gone(ProblemError):
    """410: the resource existed and is gone for good (expired, deleted)."""

    status = 410
    title = "Gone"


class RequestTimeout(ProblemError):
    """408: the request body did not arrive in time; the connection is closed with it."""

    status = 408
    title = "Request Timeout"


class UnsupportedMediaType(ProblemError):
    """415: the body is not in a media type the route reads (JSON, a form)."""

    status = 415
    title = "Unsupported Media Type"


class RangeNotSatisfiable(ProblemError):
    status = 416
    title = "Range Not Satisfiable"

    def __init__(self, detail: str, size: int) -> None:
        super().__init__(detail, headers={"Content-Range": f"bytes */{size}"})


class Unprocessable(ProblemError):
    """422: well-formed but invalid; ``FieldError``s name each field and what is wrong
    with it (the answer's ``errors``)."""

    status = 422
    title = "Unprocessable Content"


class TooManyRequests(ProblemError):
    """429: the caller is over a limit; ``retry_after`` (seconds) becomes the
    ``Retry-After`` header."""

    status = 429
    title = "Too Many Requests"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(max(1, retry_after))})


class DependencyDown(ProblemError):
    """503: the database or Redis does not answer and the route has no fallback."""

    status = 503
    title = "Service Unavailable"
    RETRY_AFTER = 5  # seconds: about what a database or Redis restart takes

    def __init__(self, detail: str) -> None:
        super().__init__(detail, headers={"Retry-After": str(self.RETRY_AFTER)})


class Overloaded(ProblemError):
    """503: this process has as much of some costly work in hand as it takes (password
    hashes); another replica, or this one a moment later, can take it."""

    status = 503
    title = "Service Unavailable"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(max(1, retry_after))})


@dataclass
class HandlerError(SluiceError):
    """A handler failure; ``permanent`` sends the entry straight to the dead letters."""

    message: str
    permanent: bool = False
    extra: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


class ServiceUnavailable(HandlerError):
    """A service the handler needs beside the database did not answer (Redis, for the
    mail budget or rate limit). Not the entry's fault: the consumer keeps the entry in
    hand and runs it again with backoff, as when the database is down, so an outage
    spends none of its deliveries."""
