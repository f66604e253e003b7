"""Two real API processes share the login limit through Redis."""

from __future__ import annotations

import aiohttp
import pytest

PASSWORD = "correct horse battery"


@pytest.mark.slow
async def test_login_failures_count_across_two_api_processes(replicas: list[str]) -> None:
    urls = replicas
    async with aiohttp.ClientSession() as http:
        user = {"email": "ada@example.org", "password": PASSWORD}
        async with http.post(f"{urls[0]}/v1/users", json=user) as response:
            assert response.status == 201
        wrong = {"email": "ada@example.org", "password": "wrong password"}
        for url in (urls[0], urls[1], urls[0], urls[1], urls[0]):
            async with http.post(f"{url}/v1/tokens", json=wrong) as response:
                assert response.status == 401
        for url in urls:
            async with http.post(f"{url}/v1/tokens", json=user) as response:
                assert response.status == 429
                assert int(response.headers["Retry-After"]) > 0
