"""Two real API processes share the login limit through Redis."""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

from sluice.redis_server import free_port
from tests.integration.conftest import Child, wait_for

PASSWORD = "correct horse battery"


@pytest.mark.slow
async def test_login_failures_count_across_two_api_processes(spawn: Callable[..., Child]) -> None:
    ports = [free_port(), free_port()]
    for port in ports:
        spawn("api", SLUICE_PORT=str(port))
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    async with aiohttp.ClientSession() as http:

        async def both_up() -> bool:
            for url in urls:
                try:
                    async with http.get(f"{url}/healthz") as response:
                        if response.status != 200:
                            return False
                except aiohttp.ClientConnectionError:
                    return False
            return True

        await wait_for(both_up)
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
