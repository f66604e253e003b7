"""Redirect traffic from several clients, and the statistics it must produce.

Each client has its own loopback address (127.0.0.x: the whole range is local
on Linux), User-Agent and Referer, so visitors differ by IP, by User-Agent or
by both, as real ones do. The ledger counts what the service answered: only a
GET that got its 302 is a visit.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sluice.events import utcnow
from tests.link_helpers import CHROME, FACEBOOK, FIREFOX, GOOGLEBOT, SLACKBOT, bearer


@dataclass(frozen=True)
class Visitor:
    name: str
    ip: str
    user_agent: str
    browser: str  # the family ua-parser reports for user_agent
    is_bot: bool
    referer: str | None
    referrer_host: str | None
    gets: int  # per round
    heads: int


VISITORS = (
    Visitor(
        "alice",
        "127.0.0.2",
        CHROME,
        "Chrome",
        False,
        "https://news.example.com/a",
        "news.example.com",
        5,
        2,
    ),
    # Same User-Agent as alice, another address: another visitor.
    Visitor("bob", "127.0.0.3", CHROME, "Chrome", False, None, None, 3, 0),
    # Same address as alice, another User-Agent: another visitor.
    Visitor(
        "carol",
        "127.0.0.2",
        FIREFOX,
        "Firefox",
        False,
        "https://www.Reddit.com/r/links",
        "www.reddit.com",
        4,
        1,
    ),
    Visitor("googlebot", "127.0.0.4", GOOGLEBOT, "Googlebot", True, None, None, 2, 1),
    Visitor(
        "slackbot",
        "127.0.0.5",
        SLACKBOT,
        "Slackbot-LinkExpanding",
        True,
        "https://news.example.com/b",
        "news.example.com",
        1,
        0,
    ),
    Visitor("facebook", "127.0.0.6", FACEBOOK, "FacebookBot", True, None, None, 1, 0),
)


@dataclass
class Ledger:
    """What the statistics must say after the traffic so far."""

    total: int = 0
    bots: int = 0
    heads: int = 0
    visitors: set[str] = field(default_factory=set)
    referrers: Counter[str | None] = field(default_factory=Counter)
    browsers: Counter[str] = field(default_factory=Counter)

    def count(self, visitor: Visitor) -> None:
        self.total += 1
        self.bots += visitor.is_bot
        self.visitors.add(visitor.name)
        self.referrers[visitor.referrer_host] += 1
        self.browsers[visitor.browser] += 1

    def expected(self, code: str) -> dict[str, Any]:
        """The stats body, less ``days`` and ``as_of``."""
        return {
            "code": code,
            "total": self.total,
            "human": self.total - self.bots,
            "bots": self.bots,
            "unique_visitors": len(self.visitors),
            "referrers": {r: n for r, n in self.referrers.items()},
            "browsers": dict(self.browsers),
        }


class Traffic:
    """One HTTP session per client address, against ``base_url``."""

    def __init__(self, base_url: str, sessions: dict[str, aiohttp.ClientSession]) -> None:
        self.base_url = base_url
        self.sessions = sessions
        self.ledger = Ledger()

    async def hit(self, code: str, visitor: Visitor, method: str = "GET") -> int:
        headers = {"User-Agent": visitor.user_agent}
        if visitor.referer:
            headers["Referer"] = visitor.referer
        session = self.sessions[visitor.ip]
        async with session.request(
            method, f"{self.base_url}/{code}", headers=headers, allow_redirects=False
        ) as response:
            await response.read()
            status = response.status
        if status == 302 and method == "GET":
            self.ledger.count(visitor)
        elif method == "HEAD":
            self.ledger.heads += 1
        return status

    async def round(self, code: str) -> list[int]:
        """Every visitor's GETs and HEADs of one round, all at once."""
        calls = [
            self.hit(code, v, method)
            for v in VISITORS
            for method in ["GET"] * v.gets + ["HEAD"] * v.heads
        ]
        return list(await asyncio.gather(*calls))

    async def rounds(self, code: str, n: int) -> None:
        for _ in range(n):
            assert set(await self.round(code)) == {302}

    async def stats(self, code: str, query: str = "") -> dict[str, Any]:
        session = self.sessions[VISITORS[0].ip]
        url = f"{self.base_url}/v1/links/{code}/stats{query}"
        async with session.get(url, headers=bearer()) as response:
            assert response.status == 200, await response.text()
            body: dict[str, Any] = await response.json()
        return body


@asynccontextmanager
async def traffic(base_url: str) -> AsyncIterator[Traffic]:
    async with AsyncExitStack() as stack:
        sessions = {}
        for ip in sorted({v.ip for v in VISITORS}):
            connector = aiohttp.TCPConnector(local_addr=(ip, 0), limit=20)
            sessions[ip] = await stack.enter_async_context(
                aiohttp.ClientSession(connector=connector)
            )
        yield Traffic(base_url, sessions)


def comparable(stats: dict[str, Any]) -> dict[str, Any]:
    """A stats body as ``Ledger.expected`` shapes it."""
    return {
        "code": stats["code"],
        "total": stats["total"],
        "human": stats["human"],
        "bots": stats["bots"],
        "unique_visitors": stats["unique_visitors"],
        "referrers": {r["referrer"]: r["visits"] for r in stats["referrers"]},
        "browsers": {b["browser"]: b["visits"] for b in stats["browsers"]},
    }


def today() -> str:
    return utcnow().date().isoformat()
