"""The testing kit's process fixtures (``sluice.app.testing``): a spawned API listens on
the port of its config."""

from __future__ import annotations

from collections.abc import Callable

from sluice.app.testing import Child, free_port, wait_answering
from sluice.config import Config


async def test_a_spawned_api_listens_on_the_port_of_its_config(
    sluice_config: Callable[..., Config], sluice_spawn: Callable[..., Child]
) -> None:
    port = free_port()
    config = sluice_config("", port=port)
    sluice_spawn(config, "api")
    await wait_answering([f"http://127.0.0.1:{port}"], timeout=20)
