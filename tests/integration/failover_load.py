"""Mixed traffic against one API process, and the ledger of what it answered (no tests here).

Each round, all at once: one round of redirects of a link from several visitors
(``link_traffic``), a view of each article by a new viewer and again by the previous
round's viewer (normally answered ``counted: false``), and one registration. The
ledger keeps only what the API answered as done: a 302 GET is a visit, a view answered
``counted: true`` is a view, a 201 is a user whose welcome mail is due. Any other
answer, or a request that got none, is kept in ``unexpected`` for the test to report.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

from tests.integration.link_traffic import Traffic

PASSWORD = "failover battery 7"


@dataclass
class Ledger:
    views: Counter[str] = field(default_factory=Counter)  # article: views answered counted
    repeats: int = 0  # repeated views answered ``counted: false``
    users: dict[str, str] = field(default_factory=dict)  # user id: email
    unexpected: Counter[str] = field(default_factory=Counter)  # "what: answer"


class Load:
    """Rounds of redirects of ``code``, views of ``articles`` and registrations."""

    def __init__(
        self,
        base_url: str,
        http: aiohttp.ClientSession,
        links: Traffic,
        code: str,
        articles: list[str],
    ) -> None:
        self.base_url, self.http, self.links, self.code = base_url, http, links, code
        self.articles = articles
        self.ledger = Ledger()
        self.rounds = 0

    async def _view(self, article: str, viewer: str, repeat: bool) -> None:
        url = f"{self.base_url}/v1/articles/{article}/views"
        try:
            async with self.http.post(url, json={"viewer": viewer}) as response:
                if response.status != 202:
                    self.ledger.unexpected[f"view: {response.status}"] += 1
                    return
                counted = bool((await response.json())["counted"])
        except aiohttp.ClientError as exc:
            self.ledger.unexpected[f"view: {type(exc).__name__}"] += 1
            return
        if counted:
            self.ledger.views[article] += 1
        elif repeat:
            self.ledger.repeats += 1
        else:
            self.ledger.unexpected["view: a new viewer not counted"] += 1

    async def _register(self, n: int) -> None:
        email = f"failover{n}@example.org"
        body = {"email": email, "password": PASSWORD, "name": f"User {n}"}
        try:
            async with self.http.post(f"{self.base_url}/v1/users", json=body) as response:
                if response.status != 201:
                    self.ledger.unexpected[f"registration: {response.status}"] += 1
                    return
                user_id = str((await response.json())["id"])
        except aiohttp.ClientError as exc:
            self.ledger.unexpected[f"registration: {type(exc).__name__}"] += 1
            return
        self.ledger.users[user_id] = email

    async def _redirects(self) -> None:
        try:
            statuses = await self.links.round(self.code)
        except aiohttp.ClientError as exc:
            self.ledger.unexpected[f"redirect: {type(exc).__name__}"] += 1
            return
        for status in statuses:
            if status != 302:
                self.ledger.unexpected[f"redirect: {status}"] += 1

    async def round(self) -> None:
        n = self.rounds
        views = [self._view(a, f"viewer-{n}", repeat=False) for a in self.articles]
        if n:
            views += [self._view(a, f"viewer-{n - 1}", repeat=True) for a in self.articles]
        await asyncio.gather(self._redirects(), self._register(n), *views)
        self.rounds += 1

    async def until(self, stop: asyncio.Event, max_rounds: int) -> None:
        """Rounds until ``stop``; at most ``max_rounds`` (the test fails if reached)."""
        while not stop.is_set():
            assert self.rounds < max_rounds, "the traffic ran longer than the test allows"
            await self.round()
