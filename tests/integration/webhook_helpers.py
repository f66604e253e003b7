"""Webhooks and links made through the API, for the webhook tests."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]


async def add_webhook(api: Client, auth: dict[str, str], url: str, *events: str) -> dict[str, Any]:
    body = {"url": url, "events": list(events)}
    response = await api.post("/v1/webhooks", json=body, headers=auth)
    assert response.status == 201, await response.text()
    hook: dict[str, Any] = await response.json()
    return hook


async def add_link(api: Client, auth: dict[str, str]) -> str:
    response = await api.post("/v1/links", json={"url": "https://example.org/a"}, headers=auth)
    assert response.status == 201, await response.text()
    return str((await response.json())["code"])
