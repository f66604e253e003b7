"""GET /docs: the API's documentation page and the Swagger UI files it loads, from this
service alone (the browser test, tests/browser/test_api_docs.py, renders it)."""

from __future__ import annotations

import re

from tests.api.helpers import Client


async def test_the_docs_page_loads_only_this_services_files(client: Client) -> None:
    response = await client.get("/docs")
    assert response.status == 200
    assert response.content_type == "text/html"
    page = await response.text()
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self' 'sha256-" in policy
    assert "unsafe-eval" not in policy
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert "/docs/assets/swagger-ui-bundle.js" in loaded
    assert "/docs/assets/swagger-ui.css" in loaded
    assert all(url.startswith("/") for url in loaded), loaded  # no CDN, no other host
    assert 'url: "/openapi.json"' in page
    for url in loaded:
        if url.startswith("/docs/assets/"):
            asset = await client.get(url)
            assert asset.status == 200, url
            assert len(await asset.read()) > 100_000  # the real Swagger UI, not a stub


async def test_an_asset_answers_not_modified_to_its_etag(client: Client) -> None:
    first = await client.get("/docs/assets/swagger-ui.css")
    assert first.content_type == "text/css"
    again = await client.get(
        "/docs/assets/swagger-ui.css", headers={"If-None-Match": first.headers["ETag"]}
    )
    assert again.status == 304


async def test_nothing_else_is_served_from_the_assets(client: Client) -> None:
    for name in ("LICENSE", "VERSION", "..%2Fdocs.html", "swagger-ui-bundle.js.map"):
        response = await client.get(f"/docs/assets/{name}")
        assert response.status == 404, name
        assert response.content_type == "application/problem+json"


async def test_an_asset_answers_a_byte_range_and_ignores_other_units(client: Client) -> None:
    whole = await (await client.get("/docs/assets/swagger-ui.css")).read()
    part = await client.get("/docs/assets/swagger-ui.css", headers={"Range": "bytes=10-19"})
    assert (part.status, await part.read()) == (206, whole[10:20])
    assert part.headers["Content-Range"] == f"bytes 10-19/{len(whole)}"
    other = await client.get("/docs/assets/swagger-ui.css", headers={"Range": "lines=1-2"})
    assert (other.status, await other.read()) == (200, whole)
