"""Links through the API, for the tests of links: one created or patched, its events, its
visits recorded as the link-stats worker applies them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sluice.app.assembly import default_apps
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkCreated, LinkUpdated, LinkVisited
from sluice.builtin.links.http.keys import VISITS
from sluice.config import Config
from sluice.store import Store
from tests.api.helpers import (
    Client,
    stored_events,
)


async def create(client: Client, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    response = await client.post(
        "/v1/links", json={"url": "https://example.org/", **body}, headers=auth
    )
    assert response.status == 201, await response.text()
    link: dict[str, Any] = await response.json()
    return link


async def link_events(store: Store) -> list[tuple[Any, str]]:
    return [
        (e, t) for e, t in await stored_events(store) if isinstance(e, LinkCreated | LinkUpdated)
    ]


async def committed(client: Client) -> None:
    """Until every visit the app recorded is committed."""
    app = client.app
    assert app is not None

    async def visits_committed() -> bool:
        return app[VISITS].settled

    await wait_for(visits_committed)


async def patch(client: Client, auth: dict[str, str], code: str, **body: Any) -> dict[str, Any]:
    response = await client.patch(f"/v1/links/{code}", json=body, headers=auth)
    assert response.status == 200, await response.text()
    link: dict[str, Any] = await response.json()
    return link


CODE = "range1"


def at(day: str, clock: str = "12:00:00") -> datetime:
    return datetime.fromisoformat(f"{day}T{clock}+00:00")


def visit(day: str, visitor: str, code: str = CODE, **fields: Any) -> LinkVisited:
    return LinkVisited(code=code, visitor=visitor, occurred_at=at(day), **fields)


async def record(store: Store, config: Config, *events: LinkVisited, stored: bool = False) -> None:
    """Commit ``events`` to the history (unless ``stored`` already) and apply them as the
    link-stats worker does, in batches of three (the history lets a replay rebuild them)."""
    link_stats = default_apps().projections["link-stats"]
    for i in range(0, len(events), 3):
        async with store.transaction() as tx:
            if not stored:
                await tx.append(*events[i : i + 3])
            await link_stats.apply(events[i : i + 3], tx, "", config)


PROXY = "127.0.0.1/32"  # the test client's address: X-Forwarded-For then names the client


GERMANY, NETHERLANDS = "80.128.0.1", "193.0.6.139"  # as tests/unit/test_geo.py
