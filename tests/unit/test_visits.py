"""What a visit records about its visitor, and the group-commit writer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.visits import VisitRecorder, classify, referrer_host
from sluice.store.sqlite import SqliteStore
from tests.link_helpers import CHROME, FACEBOOK, FIREFOX, GOOGLEBOT, SLACKBOT


@pytest.mark.parametrize(
    ("user_agent", "browser", "is_bot"),
    [
        (CHROME, "Chrome", False),
        (FIREFOX, "Firefox", False),
        (GOOGLEBOT, "Googlebot", True),
        (SLACKBOT, "Slackbot-LinkExpanding", True),
        (FACEBOOK, "FacebookBot", True),
        ("Twitterbot/1.0", "Twitterbot", True),
        ("Discordbot/2.0; +https://discordapp.com", "Discordbot", True),
        # No User-Agent is on no crawler list (docs/guides/links.md: bots are the list's).
        ("", "Other", False),
    ],
)
def test_browser_family_and_bots(user_agent: str, browser: str, is_bot: bool) -> None:
    assert classify(user_agent) == (browser, is_bot)


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("https://News.Example.COM:8443/a?b=c#d", "news.example.com"),
        ("http://example.org./", "example.org"),
        ("https://[2001:db8::1]/x", "2001:db8::1"),
        ("android-app://com.google.android.gm/", "com.google.android.gm"),
        (None, None),
        ("", None),
        ("not a url", None),
        ("/relative/path", None),
        ("https://exa mple.org/", None),
        ("http://[::1/", None),
    ],
)
def test_referrer_host(header: str | None, host: str | None) -> None:
    assert referrer_host(header) == host


def visit(i: int) -> LinkVisited:
    return LinkVisited(code="abc", visitor=f"v{i}")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.open(tmp_path / "sluice.db")
    try:
        yield store
    finally:
        await store.close()


async def stored(store: SqliteStore) -> int:
    row = await store.fetchone("SELECT COUNT(*) FROM events WHERE type = 'LinkVisited'")
    return int(row[0]) if row else 0


async def test_a_full_batch_commits_without_waiting_for_the_interval(store: SqliteStore) -> None:
    recorder = VisitRecorder(store, interval=60, batch=10)
    recorder.start()
    for i in range(10):
        recorder.record(visit(i))

    async def ten_committed() -> bool:
        return recorder.committed == 10

    await wait_for(ten_committed, timeout=5, interval=0.001)
    for i in range(10, 13):
        recorder.record(visit(i))
    await asyncio.sleep(0.05)
    assert recorder.buffered == 3  # fewer than a batch: they wait for the interval
    await recorder.close()  # ... or for shutdown
    assert await stored(store) == 13
    assert recorder.commits == 2


async def test_a_commit_that_landed_but_raised_is_not_stored_twice(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store.transaction
    raised = False

    @asynccontextmanager
    async def commits_then_raises() -> AsyncIterator[Any]:
        nonlocal raised
        async with real() as tx:
            yield tx
        if not raised:
            raised = True
            raise OSError("connection lost after COMMIT")  # the outcome is unknown to the writer

    monkeypatch.setattr(store, "transaction", commits_then_raises)
    recorder = VisitRecorder(store, interval=0.001)
    recorder.start()
    for i in range(7):
        recorder.record(visit(i))
    await recorder.close()
    assert raised
    assert await stored(store) == 7


async def test_the_buffer_is_bounded_while_the_database_fails(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down() -> Any:
        raise OSError("disk I/O error")

    monkeypatch.setattr(store, "transaction", down)
    recorder = VisitRecorder(store, interval=0.001, max_buffer=100, shutdown_timeout=0.2)
    recorder.start()
    for i in range(150):
        recorder.record(visit(i))
    assert (recorder.buffered, recorder.dropped) == (100, 50)
    await recorder.close()  # gives up after its timeout, saying how many were lost
    assert await stored(store) == 0
