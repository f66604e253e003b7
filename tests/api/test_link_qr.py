"""A link's QR code through the API: decoded back to the short URL from the PNG (its
pixels) and from the SVG (its path drawn into pixels), by zxing-cpp, as a phone's
scanner would read it; sizes, caching, and the refusals (401, 404, 422)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import png
import pytest
import zxingcpp

from sluice.builtin.links import qr
from sluice.config import Config
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.link_helpers import OTHER, add_link, add_user, bearer

# SQLite only: the image of a link's short URL: the store only reads the link.
pytestmark = pytest.mark.stores("sqlite")

CODE = "qr-link"
SVG_NS = "{http://www.w3.org/2000/svg}"


def decoded(pixels: bytes, width: int, height: int) -> str:
    """The text of the one QR code in a greyscale image (one byte a pixel)."""
    found = zxingcpp.read_barcodes(memoryview(pixels).cast("B", (height, width)))
    assert len(found) == 1, "no QR code (or more than one) in the image"
    assert found[0].format == zxingcpp.BarcodeFormat.QRCode
    return str(found[0].text)


def png_text(data: bytes) -> tuple[str, int]:
    """The PNG's QR code text, and its width in pixels."""
    width, height, rows, info = png.Reader(bytes=data).asDirect()
    assert info["greyscale"] and not info["alpha"]
    top = (1 << info["bitdepth"]) - 1
    pixels = bytes(value * 255 // top for row in rows for value in row)
    return decoded(pixels, width, height), width


def svg_text(data: bytes) -> tuple[str, int]:
    """The SVG's QR code text, and its width: segno draws each dark run as a horizontal
    line (``M``/``m`` moves, ``h`` runs, 1 unit per module, ``scale(n)``), drawn here
    into pixels, 4 per module."""
    root = ET.fromstring(data)
    width = int(root.attrib["width"])
    path = root.find(f"{SVG_NS}path")
    assert path is not None
    scale_match = re.fullmatch(r"scale\((\d+)\)", path.attrib.get("transform", "scale(1)"))
    assert scale_match is not None
    modules = width // int(scale_match[1])
    dark: set[tuple[int, int]] = set()
    x = y = 0.0
    for op, a, b in re.findall(r"([Mmh])(-?[\d.]+)(?: (-?[\d.]+))?", path.attrib["d"]):
        if op == "M":
            x, y = float(a), float(b)
        elif op == "m":
            x, y = x + float(a), y + float(b)
        else:
            dark.update((int(x) + i, int(y)) for i in range(int(float(a))))
            x += float(a)
    zoom = 4
    pixels = bytes(
        0 if (col // zoom, row // zoom) in dark else 255
        for row in range(modules * zoom)
        for col in range(modules * zoom)
    )
    return decoded(pixels, modules * zoom, modules * zoom), width


@pytest.fixture
async def link(store: Store) -> str:
    await add_link(store, CODE, "https://example.org/somewhere")
    await add_user(store)
    return CODE


async def get_qr(client: Client, query: str = "", **headers: str) -> Any:
    return await client.get(f"/v1/links/{CODE}/qr{query}", headers={**bearer(), **headers})


@pytest.mark.usefixtures("link")
async def test_the_svg_by_default_reads_back_as_the_short_url(
    client: Client, config: Config
) -> None:
    response = await get_qr(client)
    assert response.status == 200
    assert response.content_type == "image/svg+xml"
    text, width = svg_text(await response.read())
    assert text == f"{config.base_url}/{CODE}"
    assert width % qr.SCALE_DEFAULT == 0


@pytest.mark.usefixtures("link")
@pytest.mark.parametrize("size", [1, 3, 40])
async def test_the_png_reads_back_as_the_short_url_at_each_size(
    client: Client, config: Config, size: int
) -> None:
    response = await get_qr(client, f"?format=png&size={size}")
    assert response.status == 200
    assert response.content_type == "image/png"
    data = await response.read()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    if size == 1:  # one pixel a module: too small for a scanner, the pixels still count
        width, _, _, _ = png.Reader(bytes=data).asDirect()
        assert width in (25 + 2 * qr.BORDER, 29 + 2 * qr.BORDER)  # version 2 or 3
        return
    text, width = png_text(data)
    assert text == f"{config.base_url}/{CODE}"
    assert width % size == 0 and width // size in (25 + 8, 29 + 8)  # version 2 or 3


@pytest.mark.usefixtures("link")
async def test_the_image_is_cached_and_revalidated_by_its_etag(client: Client) -> None:
    first = await get_qr(client, "?format=png")
    etag = first.headers["ETag"]
    assert first.headers["Cache-Control"] == "private, max-age=86400"
    again = await get_qr(client, "?format=png", **{"If-None-Match": etag})
    assert again.status == 304
    assert again.headers["ETag"] == etag
    other = await get_qr(client, "?format=svg", **{"If-None-Match": etag})
    assert other.status == 200 and other.headers["ETag"] != etag


@pytest.mark.usefixtures("link")
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?format=gif", "format"),
        ("?size=0", "size"),
        ("?size=41", "size"),
        ("?size=big", "size"),
        ("?size=-3", "size"),
    ],
)
async def test_a_bad_format_or_size_is_422(client: Client, query: str, field: str) -> None:
    body = await problem(await get_qr(client, query), 422)
    assert [error["field"] for error in body["errors"]] == [field]


@pytest.mark.usefixtures("link")
async def test_another_users_link_and_an_unknown_code_are_404(client: Client, store: Store) -> None:
    await add_link(store, "theirs", "https://example.org/", owner=OTHER)
    for code in ("theirs", "nosuch"):
        await problem(await client.get(f"/v1/links/{code}/qr", headers=bearer()), 404)


@pytest.mark.usefixtures("link")
async def test_a_qr_code_needs_a_token(client: Client) -> None:
    await problem(await client.get(f"/v1/links/{CODE}/qr"), 401)
