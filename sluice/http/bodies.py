"""JSON in and out: request bodies decoded into Structs, responses encoded by msgspec."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from sluice.errors import (
    BadRequest,
    FieldError,
    RequestTimeout,
    Unprocessable,
    UnsupportedMediaType,
)

T = TypeVar("T", bound=msgspec.Struct)

# The media type of a JSON body, request or response.
JSON = "application/json"
PROBLEM_JSON = "application/problem+json"

_encoder = msgspec.json.Encoder()


def json_response(
    obj: Any, status: int = 200, *, content_type: str = JSON, headers: dict[str, str] | None = None
) -> web.Response:
    """``obj`` (a msgspec struct, or anything msgspec encodes) as a JSON answer."""
    return web.Response(
        body=_encoder.encode(obj), status=status, content_type=content_type, headers=headers
    )


def is_json(request: web.BaseRequest) -> bool:
    """``application/json`` or any ``+json`` type, in UTF-8 (the default for JSON)."""
    mime = request.content_type
    if mime != JSON and not (mime.startswith("application/") and mime.endswith("+json")):
        return False
    return (request.charset or "utf-8").lower() in ("utf-8", "utf8")


def _check_size(request: web.BaseRequest) -> None:
    """Refuse a declared oversized body before reading it; ``read()`` catches undeclared ones."""
    limit = request.client_max_size
    length = request.content_length
    if length is not None and length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)


async def buffer_body(request: web.BaseRequest, seconds: float) -> None:
    """Read the whole body now: over ``client_max_size`` it is a 413 on every route, also
    on those that never read their body (``read_json`` later gets the same bytes).

    The whole body must arrive within ``seconds`` (``SLUICE_BODY_TIMEOUT_SECONDS``):
    a body that stalls, or trickles in a byte at a time, would hold the connection for
    as long as its sender likes. 408 beyond it, and the connection closes with the
    answer (see ``close_with``)."""
    _check_size(request)
    try:
        async with asyncio.timeout(seconds):
            await request.read()
    except web.RequestPayloadError as exc:  # not in its Content-Encoding, a broken chunk
        raise BadRequest(f"the request body cannot be read: {exc}") from None
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {seconds:g} seconds"
        ) from None


async def close_with(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """Send ``response`` now and close the connection after it: aiohttp would otherwise
    keep reading what is left of the body (its lingering close, 10 s more)."""
    response.force_close()
    with contextlib.suppress(ConnectionError):
        await response.prepare(request)
        await response.write_eof()
    request.protocol.force_close()


def _field_error(exc: msgspec.ValidationError) -> FieldError:
    # msgspec words it as "Expected `str`, got `int` - at `$.viewer`".
    message, _, path = str(exc).partition(" - at `")
    path = path.rstrip("`").removeprefix("$").removeprefix(".")
    return FieldError(path or "body", message)


async def read_json(request: web.Request, struct: type[T], *, optional: bool = False) -> T:
    """Decode the body into ``struct``: 415 not JSON, 400 malformed or wrong types, 413 too big.

    With ``optional``, an empty body stands for ``struct()`` (all defaults).
    """
    _check_size(request)
    if request.body_exists and not is_json(request):
        raise UnsupportedMediaType(f"the request body must be {JSON} (UTF-8)")
    raw = await request.read()
    if not raw.strip():
        if optional:
            return struct()
        raise BadRequest("a JSON request body is required")
    try:
        return msgspec.json.decode(raw, type=struct)
    except msgspec.ValidationError as exc:
        raise BadRequest("the request body has the wrong shape", [_field_error(exc)]) from None
    except msgspec.DecodeError:
        raise BadRequest("malformed JSON") from None
    except RecursionError:  # msgspec's depth limit, also inside a field it would ignore
        raise BadRequest("the JSON is nested too deeply") from None


def parse_limit(raw: str, maximum: int) -> int | None:
    """A ``limit`` query parameter: an integer from 1 to ``maximum``, else None."""
    digits = raw.isascii() and raw.isdigit() and len(raw) <= 6
    limit = int(raw) if digits else 0
    return limit if 1 <= limit <= maximum else None


def query_limit(request: web.Request, default: int, maximum: int) -> int:
    """The ``limit`` query parameter (``default`` when absent); 422 when not 1..``maximum``."""
    limit = parse_limit(request.query.get("limit", str(default)), maximum)
    if limit is None:
        raise Unprocessable(
            "invalid query parameters",
            [FieldError("limit", f"must be an integer from 1 to {maximum}")],
        )
    return limit
