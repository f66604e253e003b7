"""HTTP traffic against both API replicas, and the ledger of what they answered.

Only answers count. A request that got no answer because its process was
killed (the connection dropped after it was sent) is *uncertain*: the command
may or may not have committed. A refused connection reached no process at all
and is simply sent again elsewhere. The ledger keeps the three apart so the
final checks can be exact:

- views: every view has a viewer of its own, so each is counted once or not
  at all; uncertain views are not sent again (a repeat would be a new view);
- registrations: an uncertain one is sent again with the same email to a live
  replica until it answers 201 (it had not committed) or 409 (it had);
- redirects: counted by their 302s. Before an API process is killed its
  redirect traffic is drained (see ``faults.quiesce_redirects``), so no 302 is
  answered from a visit buffer that the kill then loses.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp

from sluice.aio.waiting import wait_or_stop
from sluice.builtin.accounts.mail.links import verify_token
from sluice.events import utcnow

ARTICLES = tuple(f"chaos-article-{i}" for i in range(6))
PASSWORD = "chaos horse battery"
AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
)
# Requests per second of each loop; several loops per kind keep requests in flight.
VIEW_LOOPS, VIEW_RATE = 2, 20.0
REDIRECT_LOOPS, REDIRECT_RATE = 2, 30.0
REGISTER_RATE = 3.0
# The request reached a process that died before answering: it may have committed.
UNCERTAIN = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientOSError,
    TimeoutError,
)


@dataclass
class Api:
    """One API replica as the traffic sees it."""

    index: int
    name: str
    url: str
    alive: bool = True
    redirects_open: bool = True
    redirects_in_flight: int = 0
    requests_in_flight: int = 0  # views and registrations
    registrations_in_flight: int = 0
    registering: asyncio.Event = field(default_factory=asyncio.Event)  # one is in flight

    @property
    def referrer_host(self) -> str:
        """Sent as the Referer of its redirects: the history tells which replica took a visit."""
        return f"via-api{self.index}.chaos.test"


@dataclass
class Ledger:
    views: dict[str, str] = field(default_factory=dict)  # viewer -> article, 202 counted
    views_uncertain: dict[str, str] = field(default_factory=dict)
    views_not_counted: int = 0  # 202 counted=false: never expected, every viewer is new
    users: dict[str, str | None] = field(default_factory=dict)  # email -> id (None: 409)
    registrations_resent: int = 0
    redirects: Counter[tuple[str, int]] = field(default_factory=Counter)  # (code, api) -> 302s
    refused: int = 0
    unexpected: list[str] = field(default_factory=list)  # any other answer or failure


@dataclass(frozen=True)
class Reminder:
    id: str
    cron: str
    timezone: str
    owner_email: str


@dataclass(frozen=True)
class Setup:
    links: dict[str, str]  # code -> owner's token
    reminders: list[Reminder]


async def _expect(response: aiohttp.ClientResponse, status: int) -> Any:
    assert response.status == status, f"{response.method} {response.url}: {response.status}"
    return await response.json()


async def prepare(http: aiohttp.ClientSession, api: Api, ledger: Ledger, link_key: bytes) -> Setup:
    """Two owners with tokens and verified addresses, three links and two reminders, created
    before any fault (``link_key``: the key of the links in mails, to verify with)."""
    links: dict[str, str] = {}
    reminders: list[Reminder] = []
    crons = [("*/3 * * * * *", "UTC"), ("*/4 * * * * *", "Europe/Berlin")]
    for name, (cron, zone) in zip(("alice", "bob"), crons, strict=True):
        body = {"email": f"{name}@chaos.test", "password": PASSWORD, "name": name.title()}
        async with http.post(f"{api.url}/v1/users", json=body) as response:
            user_id = str((await _expect(response, 201))["id"])
        ledger.users[body["email"]] = user_id
        # Reminders mail verified addresses only: follow the link of the welcome mail.
        expires = utcnow() + timedelta(days=1)
        token = verify_token(link_key, user_id, body["email"], expires)
        async with http.post(f"{api.url}/v1/users/verify", json={"token": token}) as response:
            await _expect(response, 200)
        async with http.post(f"{api.url}/v1/tokens", json=body) as response:
            auth = {"Authorization": f"Bearer {(await _expect(response, 201))['token']}"}
        for i in range(3 if name == "alice" else 0):
            link = {"url": f"https://example.org/{name}/{i}"}
            async with http.post(f"{api.url}/v1/links", json=link, headers=auth) as response:
                links[(await _expect(response, 201))["code"]] = auth["Authorization"]
        reminder = {"cron": cron, "timezone": zone, "text": f"{name}'s chaos reminder"}
        async with http.post(f"{api.url}/v1/reminders", json=reminder, headers=auth) as response:
            created = await _expect(response, 201)
        reminders.append(Reminder(created["id"], cron, zone, body["email"]))
    return Setup(links, reminders)


class Traffic:
    """Paced request loops against every live replica until ``stop``."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        apis: list[Api],
        setup: Setup,
        ledger: Ledger,
        rng: random.Random,
    ) -> None:
        self.http = http
        self.apis = apis
        self.codes = sorted(setup.links)
        self.ledger = ledger
        self.rng = rng
        self._ids = itertools.count()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loops: list[tuple[float, Callable[[], Awaitable[None]]]] = [
            *[(VIEW_RATE, self._view)] * VIEW_LOOPS,
            *[(REDIRECT_RATE, self._redirect)] * REDIRECT_LOOPS,
            (REGISTER_RATE, self._register),
        ]
        self._tasks = [asyncio.create_task(self._paced(rate, act)) for rate, act in loops]

    async def stop(self) -> Ledger:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.ledger

    async def _paced(self, per_second: float, action: Callable[[], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self._stop.is_set():
            try:
                await action()
            except Exception as exc:  # a bug here must fail the test, not end the traffic
                self.ledger.unexpected.append(f"{action.__name__}: {exc!r}")
            due = max(due + 1 / per_second, loop.time())  # late: go on, never burst
            await wait_or_stop(self._stop, due - loop.time())

    def _pick(self, *, redirect: bool = False) -> Api | None:
        live = [a for a in self.apis if a.alive and (a.redirects_open or not redirect)]
        return self.rng.choice(live) if live else None

    async def _view(self) -> None:
        api = self._pick()
        if api is None:
            return
        viewer, article = f"viewer-{next(self._ids)}", self.rng.choice(ARTICLES)
        url = f"{api.url}/v1/articles/{article}/views"
        body: Any
        api.requests_in_flight += 1
        try:
            async with self.http.post(url, json={"viewer": viewer}) as response:
                status = response.status
                body = await response.json() if status == 202 else await response.text()
        except aiohttp.ClientConnectorError:
            self.ledger.refused += 1
            return
        except UNCERTAIN:
            self.ledger.views_uncertain[viewer] = article
            return
        finally:
            api.requests_in_flight -= 1
        if status == 202 and body["counted"] is True:
            self.ledger.views[viewer] = article
        elif status == 202:
            self.ledger.views_not_counted += 1
        else:
            self.ledger.unexpected.append(f"view via {api.name}: {status} {body}")

    async def _register(self) -> None:
        n = next(self._ids)
        body = {"email": f"user-{n}@chaos.test", "password": PASSWORD, "name": f"User {n}"}
        sent_before = False  # an earlier attempt got no answer: a 409 is then our own user
        while not self._stop.is_set() or sent_before:
            api = self._pick()
            if api is None:
                await asyncio.sleep(0.05)  # both replicas restarting; try again shortly
                continue
            api.requests_in_flight += 1
            api.registrations_in_flight += 1
            api.registering.set()
            try:
                async with self.http.post(f"{api.url}/v1/users", json=body) as response:
                    status = response.status
                    answer = await response.json(content_type=None)  # or problem+json
            except aiohttp.ClientConnectorError:
                self.ledger.refused += 1
                continue
            except UNCERTAIN:
                sent_before = True
                self.ledger.registrations_resent += 1
                continue
            finally:
                api.requests_in_flight -= 1
                api.registrations_in_flight -= 1
                if not api.registrations_in_flight:
                    api.registering.clear()
            if status == 201:
                self.ledger.users[body["email"]] = answer["id"]
            elif status == 409 and sent_before:
                self.ledger.users[body["email"]] = None  # committed by the killed process
            else:
                self.ledger.unexpected.append(f"registration via {api.name}: {status} {answer}")
            return

    async def _redirect(self) -> None:
        api = self._pick(redirect=True)
        if api is None:
            return
        code = self.rng.choice(self.codes)
        headers = {
            "User-Agent": self.rng.choice(AGENTS),
            "Referer": f"https://{api.referrer_host}/page",
        }
        api.redirects_in_flight += 1
        try:
            async with self.http.get(
                f"{api.url}/{code}", headers=headers, allow_redirects=False
            ) as response:
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            # Redirect traffic leaves a replica before it is killed: nothing may fail.
            self.ledger.unexpected.append(f"redirect via {api.name}: {exc!r}")
            return
        finally:
            api.redirects_in_flight -= 1
        if status == 302:
            self.ledger.redirects[(code, api.index)] += 1
        else:
            self.ledger.unexpected.append(f"redirect via {api.name}: {status}")
