"""A link with many visits committed straight into the history (as the API's visit writer
would, only faster), an export of it requested, and waiting for the relay to publish."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.exports.jobs import Job
from sluice.relay.relay import POSITION
from sluice.store import Store
from tests.link_helpers import OWNER, add_link, add_user

CODE = "bigone"
OTHER_CODE = "another"
VISITS = 50_000
OTHERS = 5_000  # visits of another link, interleaved: never in the CSV
PER_TX = 5_000
BASE = datetime(2026, 3, 1, tzinfo=UTC)


def visit(i: int, code: str) -> LinkVisited:
    browser = ("Chrome", "Firefox", "Googlebot")[i % 3]
    return LinkVisited(
        code=code,
        visitor=f"visitor-{i}",
        referrer_host=(None, "news.example.com", "t.co")[i % 3],
        browser=browser,
        is_bot=browser == "Googlebot",
        occurred_at=BASE + timedelta(milliseconds=i),
    )


async def seed(store: Store) -> None:
    """The two links, then VISITS + OTHERS visits, the other link's every 11th."""
    await add_link(store, CODE, "https://example.org/big")
    await add_link(store, OTHER_CODE, "https://example.org/other")
    await add_user(store)
    total = VISITS + OTHERS
    for start in range(0, total, PER_TX):
        async with store.transaction() as tx:
            await tx.append(
                *(
                    visit(i, OTHER_CODE if i % 11 == 10 else CODE)
                    for i in range(start, min(total, start + PER_TX))
                )
            )


async def small_export(store: Store) -> Job:
    """The link with 3,000 visits and an export of it requested."""
    await add_link(store, CODE, "https://example.org/big")
    await add_user(store)
    async with store.transaction() as tx:
        await tx.append(*(visit(i, CODE) for i in range(3_000)))
    job, _ = await jobs.request_export(store, OWNER, CODE, "trace-export")
    return job


async def all_published(store: Store) -> None:
    async def published() -> bool:
        return await store.position(POSITION) == await store.max_seq()

    await wait_for(published)
