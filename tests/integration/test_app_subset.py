"""A deployment that runs only some of the built-in apps (``SLUICE_APPS=links,accounts``):
their routes, groups and projections serve as in the full one; the other apps' routes
answer 404, their groups are not listed, run or needed."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp

from sluice.app.testing import Child, sluice_command, wait_answering, wait_for
from sluice.config import Config
from sluice.embedded.redis_server import free_port

SUBSET = "links,accounts"
ADMIN_TOKEN = "subset-admin-token-of-forty-characters-x"


async def test_links_and_accounts_alone_serve_links_and_registrations(
    sluice_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    port = free_port()
    config = sluice_config(SUBSET, port=port, admin_token=ADMIN_TOKEN)
    listed = await sluice_command(config, "groups", "list")
    assert listed.returncode == 0, listed.stderr
    groups = {line.split()[0] for line in listed.stdout.splitlines()}
    assert groups == {"exports", "imports", "link-stats", "mail", "webhooks"}

    sluice_spawn(config, "api", SLUICE_PORT=str(port))
    sluice_spawn(config, "relay")
    sluice_spawn(config, "worker", "link-stats")
    url = f"http://127.0.0.1:{port}"
    await wait_answering([url])
    async with aiohttp.ClientSession(url) as http:
        user = {"email": "subset@example.com", "password": "correct horse battery"}
        async with http.post("/v1/users", json=user) as registered:
            assert registered.status == 201, await registered.text()
        async with http.post("/v1/tokens", json=user) as issued:
            assert issued.status == 201, await issued.text()
            bearer = {"Authorization": f"Bearer {(await issued.json())['token']}"}
        async with http.post(
            "/v1/links", json={"url": "https://example.com/subset"}, headers=bearer
        ) as created:
            assert created.status == 201, await created.text()
            code = (await created.json())["code"]
        async with http.get(f"/{code}", allow_redirects=False) as followed:
            assert followed.status == 302
            assert followed.headers["Location"] == "https://example.com/subset"

        async def counted() -> bool:
            async with http.get(f"/v1/links/{code}/stats", headers=bearer) as stats:
                return stats.status == 200 and (await stats.json())["total"] == 1

        await wait_for(counted, timeout=30)

        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        absent = [
            ("GET", "/v1/reminders", bearer),  # reminders
            ("POST", "/v1/articles/a-1/views", {}),  # articles
            ("GET", "/v1/admin/events", admin),  # operations
            ("GET", "/v1/admin/dead-letters", admin),
            ("GET", "/admin", {}),  # the operations page: a code like any other here
        ]
        for method, path, headers in absent:
            async with http.request(method, path, headers=headers) as answer:
                assert answer.status == 404, (method, path, answer.status)
        async with http.get("/healthz") as health:  # the core's own routes stay
            assert health.status == 200
        async with http.get("/openapi.json") as document:
            paths = (await document.json())["paths"]
        assert "/v1/links" in paths and "/v1/users" in paths
        assert not [p for p in paths if p.startswith(("/v1/reminders", "/v1/articles"))]


async def test_a_group_of_an_app_not_loaded_is_refused_by_name(
    sluice_config: Callable[..., Config],
) -> None:
    config = sluice_config(SUBSET)
    paused = await sluice_command(config, "groups", "pause", "article-views")
    assert paused.returncode == 2
    assert "unknown group 'article-views'" in paused.stderr
    assert "link-stats" in paused.stderr
