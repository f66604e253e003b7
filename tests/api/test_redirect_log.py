"""SLUICE_REDIRECT_LOG (docs/design/redirects.md): a redirect that records a visit writes no request
line by default, its visit being its record; every other answer of ``/{code}`` is logged; ``all``
logs every redirect."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.http.app_keys import STORE
from sluice.store import Store
from sluice.telemetry.logs import add_request
from tests.api.helpers import AiohttpClient, Client, stored_events
from tests.link_helpers import add_link

GETS = 4  # the first reads the database, the others come from the cache


async def traffic(client: Client, store: Store) -> tuple[list[dict[str, Any]], list[str]]:
    """GETs of a live link, a HEAD, an unknown and a disabled code; the request lines
    logged meanwhile and the trace ids the redirects answered with."""
    await add_link(store, "live01", "https://example.org/")
    await add_link(store, "gone01", "https://example.org/", disabled=True)
    traces = []
    with structlog.testing.capture_logs(processors=[add_request]) as logs:
        for _ in range(GETS):
            response = await client.get("/live01", allow_redirects=False)
            assert response.status == 302
            traces.append(response.headers["X-Trace-Id"])
        assert (await client.head("/live01", allow_redirects=False)).status == 302
        assert (await client.get("/nope01")).status == 404
        assert (await client.get("/gone01")).status == 410
    return [e for e in logs if e["event"] == "request"], traces


def lines(logged: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(e["method"], e["path"], e["status"]) for e in logged]


def visits_stored(store: Store, n: int) -> Callable[[], Any]:
    async def stored() -> bool:
        return len([e for e, _ in await stored_events(store) if isinstance(e, LinkVisited)]) == n

    return stored


async def test_redirects_with_a_visit_write_no_line_and_their_visits_carry_the_trace(
    client: Client, store: Store
) -> None:
    logged, traces = await traffic(client, store)
    assert lines(logged) == [
        ("HEAD", "/live01", 302),
        ("GET", "/nope01", 404),
        ("GET", "/gone01", 410),
    ]
    await wait_for(visits_stored(store, GETS), timeout=5)
    visits = [e for e, _ in await stored_events(store) if isinstance(e, LinkVisited)]
    assert sorted(v.trace_id for v in visits) == sorted(traces)
    assert len(set(traces)) == GETS


async def test_all_logs_every_redirect(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(redirect_log="all")))
    assert client.app is not None
    logged, traces = await traffic(client, client.app[STORE])
    assert lines(logged) == [("GET", "/live01", 302)] * GETS + [
        ("HEAD", "/live01", 302),
        ("GET", "/nope01", 404),
        ("GET", "/gone01", 410),
    ]
    assert [e["trace_id"] for e in logged[:GETS]] == traces
