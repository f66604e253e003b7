"""A link's short URL as a QR code image, for its owner (``sluice.builtin.links.qr`` draws it)."""

from __future__ import annotations

import hashlib
from typing import cast

import segno
from aiohttp import hdrs, web

from sluice.app import (
    UNAUTHORIZED,
    USER,
    FieldError,
    NotFound,
    Route,
    Unprocessable,
    config,
    problem,
    require_user,
    store,
)
from sluice.builtin.links import qr
from sluice.builtin.links.http.schemas import CODE, NO_LINK
from sluice.builtin.links.stored import get_link

# The image of a code never changes (codes are never reused, the base URL is the
# deployment's): a day in the owner's browser, revalidated by ETag after that.
CACHE_CONTROL = "private, max-age=86400"


def _query(request: web.Request) -> tuple[qr.QrFormat, int]:
    errors = []
    fmt = request.query.get("format", "svg")
    if fmt not in qr.FORMATS:
        errors.append(FieldError("format", "must be svg or png"))
    raw = request.query.get("size", str(qr.SCALE_DEFAULT))
    scale = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 3 else 0
    if not qr.SCALE_MIN <= scale <= qr.SCALE_MAX:
        errors.append(
            FieldError("size", f"must be an integer from {qr.SCALE_MIN} to {qr.SCALE_MAX}")
        )
    if errors:
        raise Unprocessable("invalid query parameters", errors)
    return cast(qr.QrFormat, fmt), scale


async def link_qr(request: web.Request) -> web.Response:
    """The short URL as SVG or PNG; 304 when ``If-None-Match`` names the image."""
    user = await require_user(request)
    code = request.match_info["code"]
    fmt, scale = _query(request)
    link = await get_link(store(request), code)
    if link is None or link.owner_id != user.id:
        raise NotFound(f"you have no link {code!r}")
    short_url = f"{config(request).base_url}/{link.code}"
    # Named by what draws it, so a 304 needs no drawing.
    named = f"{short_url}\0{fmt}\0{scale}\0{segno.__version__}".encode()
    etag = hashlib.sha256(named).hexdigest()[:32]
    headers = {hdrs.ETAG: f'"{etag}"', hdrs.CACHE_CONTROL: CACHE_CONTROL}
    if_none_match = request.if_none_match
    if if_none_match and any(tag.value in (etag, "*") for tag in if_none_match):
        return web.Response(status=304, headers=headers)
    body = qr.render(short_url, fmt, scale)
    return web.Response(body=body, content_type=qr.CONTENT_TYPES[fmt], headers=headers)


ROUTES = (
    Route(
        "GET",
        "/v1/links/{code}/qr",
        link_qr,
        {
            "operationId": "getLinkQrCode",
            "summary": "One of the caller's links' short URL as a QR code image",
            "description": (
                f"`format` svg (default) or png; `size` the pixels per module, {qr.SCALE_MIN} to"
                f" {qr.SCALE_MAX} (default {qr.SCALE_DEFAULT}): the image is (modules + 8) x size"
                " pixels wide, a quiet zone of 4 modules on each side. Error correction M."
                " Cached privately for a day (`Cache-Control`), then revalidated with the"
                " strong `ETag` (`If-None-Match`: 304)."
            ),
            "security": USER,
            "parameters": [
                CODE,
                {
                    "name": "format",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "enum": list(qr.FORMATS), "default": "svg"},
                },
                {
                    "name": "size",
                    "in": "query",
                    "required": False,
                    "description": "pixels per module",
                    "schema": {
                        "type": "integer",
                        "minimum": qr.SCALE_MIN,
                        "maximum": qr.SCALE_MAX,
                        "default": qr.SCALE_DEFAULT,
                    },
                },
                {
                    "name": "If-None-Match",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": {
                    "description": "the QR code",
                    "headers": {
                        "ETag": {"schema": {"type": "string"}, "required": True},
                        "Cache-Control": {"schema": {"type": "string"}, "required": True},
                    },
                    "content": {
                        "image/svg+xml": {"schema": {"type": "string"}},
                        "image/png": {"schema": {"type": "string", "format": "binary"}},
                    },
                },
                "304": {"description": "If-None-Match names this image"},
                "401": UNAUTHORIZED,
                "404": NO_LINK,
                "422": problem(
                    f"a format other than svg or png, or a size outside "
                    f"{qr.SCALE_MIN}..{qr.SCALE_MAX}"
                ),
            },
        },
    ),
)
