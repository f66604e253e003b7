"""sluice on several hosts that share only PostgreSQL and Redis (docs/guides/several-hosts.md).

Every process is a real ``sluice`` child with a data dir of its own, as if
each ran on a host of its own: two APIs, the relay, the workers of every
group (the mail group twice, on two hosts), two schedulers. Traffic goes to
both APIs; afterwards every count is exact: one welcome mail per user across
both mail hosts, views, redirects and their unique visitors (both APIs hash a
visitor with the one key in the database), a reminder's occurrences, and an
export built on one host and downloaded from the other. An admin token that
``sluice up`` generated elsewhere opens the admin routes of both APIs.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.app.assembly import default_apps, open_resources
from sluice.app.testing import Child, child_env, wait_answering, wait_for
from sluice.builtin.accounts.mail.links import load_link_key, verify_token
from sluice.builtin.reminders import stored
from sluice.config import Config
from sluice.embedded.redis_server import free_port
from sluice.events import utcnow
from sluice.http.admin_token import record_generated
from sluice.process.resources import Resources

pytestmark = [pytest.mark.slow, pytest.mark.stores("postgres")]

PASSWORD = "many hosts battery"
ADMIN_TOKEN = "generated-elsewhere-0123456789abcdef"
AGENTS = [
    f"Mozilla/5.0 (X11; Linux x86_64; rv:{v}.0) Gecko/20100101 Firefox/{v}.0" for v in (1, 2, 3)
]


class Hosts:
    """Named processes, each with its own data dir under ``root``."""

    def __init__(self, config: Config, root: Path) -> None:
        self.env = child_env(config, SLUICE_REMINDER_MIN_INTERVAL="1")
        # Secrets every host must agree on come from the database, not a setting: the
        # test's fixed visitor key and admin token are left out.
        self.env.pop("SLUICE_ADMIN_TOKEN", None)
        self.env.pop("SLUICE_VISITOR_KEY", None)
        self.root = root
        self.ports = {"api-0": free_port(), "api-1": free_port()}
        self.children: list[Child] = []

    def start(self, name: str, *args: str) -> None:
        env = dict(self.env, SLUICE_DATA_DIR=str(self.root / name))
        if name in self.ports:
            env["SLUICE_PORT"] = str(self.ports[name])
            env["SLUICE_BASE_URL"] = "https://sho.rt"
        log = self.root / f"{name}.log"
        self.root.mkdir(parents=True, exist_ok=True)
        self.children.append(Child(list(args), env).start(log=log))

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def stop(self) -> None:
        for child in self.children:
            child.terminate()


@pytest.fixture
async def hosts(config: Config, tmp_path: Path) -> AsyncIterator[Hosts]:
    running = Hosts(config, tmp_path / "hosts")
    running.start("api-0", "api")
    running.start("api-1", "api")
    running.start("relay", "relay")
    for group in sorted(default_apps().groups):
        running.start(f"worker-{group}", "worker", group, "--consumer", group)
    running.start("worker-mail-2", "worker", "mail", "--consumer", "mail-2")
    running.start("scheduler-0", "scheduler")
    running.start("scheduler-1", "scheduler")
    try:
        await wait_answering([running.url(api) for api in running.ports])
        yield running
    finally:
        running.stop()


async def _json(response: aiohttp.ClientResponse, status: int) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def test_processes_on_separate_data_dirs_keep_every_count_exact(
    hosts: Hosts, config: Config, tmp_path: Path
) -> None:
    api = [hosts.url("api-0"), hosts.url("api-1")]
    async with open_resources(config) as resources, aiohttp.ClientSession() as http:
        await record_generated(resources.store, ADMIN_TOKEN)
        tokens = []
        for i in range(12):
            user = {"email": f"host{i}@example.org", "password": PASSWORD}
            await _json(await http.post(f"{api[i % 2]}/v1/users", json=user), 201)
            token = await _json(await http.post(f"{api[(i + 1) % 2]}/v1/tokens", json=user), 201)
            tokens.append({"Authorization": f"Bearer {token['token']}"})
        owner = tokens[0]
        async with http.get(f"{api[1]}/v1/me", headers=owner) as response:
            me = await _json(response, 200)
        # Reminders mail verified addresses only: the link the welcome mail carries.
        key = await load_link_key(resources.store)
        token = verify_token(key, me["id"], me["email"], utcnow() + timedelta(days=1))
        await _json(await http.post(f"{api[0]}/v1/users/verify", json={"token": token}), 200)

        for i in range(40):  # 40 distinct viewers of one article, through both APIs
            body = await _json(
                await http.post(f"{api[i % 2]}/v1/articles/spread/views", json={"viewer": f"v{i}"}),
                202,
            )
            assert body == {"counted": True}

        link = await _json(
            await http.post(
                f"{api[0]}/v1/links", json={"url": "https://example.org/"}, headers=owner
            ),
            201,
        )
        code = link["code"]
        for i in range(30):  # 3 visitors (User-Agents), alternating APIs
            async with http.get(
                f"{api[i % 2]}/{code}", headers={"User-Agent": AGENTS[i % 3]}, allow_redirects=False
            ) as response:
                assert response.status == 302

        reminder = await _json(
            await http.post(
                f"{api[1]}/v1/reminders",
                json={"cron": "* * * * * *", "timezone": "UTC", "text": "tick"},
                headers=owner,
            ),
            201,
        )

        async def fired_three() -> bool:
            return len(await stored.occurrences(resources.store, reminder["id"])) >= 3

        await wait_for(fired_three, timeout=30)
        async with http.delete(f"{api[0]}/v1/reminders/{reminder['id']}", headers=owner) as r:
            assert r.status == 204

        await _settled(resources, http, api, code, owner)
        await _export_across_hosts(http, api, code, owner)
        for url in api:  # the generated token, known to both through the database
            async with http.get(
                f"{url}/v1/admin/streams", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ) as response:
                assert response.status == 200
        fired = await stored.occurrences(resources.store, reminder["id"])
        await _check_mail(resources, hosts.root, fired, reminder["id"])


async def _settled(
    resources: Resources, http: aiohttp.ClientSession, api: list[str], code: str, owner: Any
) -> None:
    async def counted() -> bool:
        async with http.get(f"{api[1]}/v1/articles/spread") as response:
            views = (await response.json())["views"]
        async with http.get(f"{api[0]}/v1/links/{code}/stats", headers=owner) as response:
            stats = await response.json()
        return views == 40 and stats["total"] == 30

    await wait_for(counted, timeout=30)
    async with http.get(f"{api[1]}/v1/links/{code}/stats", headers=owner) as response:
        stats = await _json(response, 200)
    assert (stats["total"], stats["unique_visitors"], stats["bots"]) == (30, 3, 0)
    row = await resources.store.fetchone("SELECT COUNT(*) FROM secrets WHERE name = 'visitor-key'")
    assert row == (1,)


async def _export_across_hosts(
    http: aiohttp.ClientSession, api: list[str], code: str, owner: Any
) -> None:
    job = await _json(await http.post(f"{api[0]}/v1/links/{code}/exports", headers=owner), 202)

    async def succeeded() -> bool:
        async with http.get(f"{api[1]}/v1/jobs/{job['job_id']}", headers=owner) as response:
            return (await response.json())["status"] == "succeeded"

    await wait_for(succeeded, timeout=30)
    async with http.get(f"{api[1]}/v1/jobs/{job['job_id']}/result", headers=owner) as response:
        assert response.status == 200
        rows = list(csv.DictReader(io.StringIO(await response.text())))
    assert len(rows) == 30
    assert len({row["visitor"] for row in rows}) == 3


async def _check_mail(resources: Resources, root: Path, fired: list[Any], reminder_id: str) -> None:
    """One welcome per user and one mail per occurrence, over both mail hosts together."""

    async def sent() -> bool:
        rows = await resources.store.fetchall("SELECT state FROM mail_sends")
        return len(rows) == 12 + len(fired) and {r[0] for r in rows} == {"sent"}

    await wait_for(sent, timeout=30)
    files = [
        p.name
        for host in ("worker-mail", "worker-mail-2")
        for p in (root / host / "mail").glob("*.eml")
    ]
    assert len(files) == len(set(files)) == 12 + len(fired)
    assert sum(name.startswith("welcome_") for name in files) == 12
    assert sum(name.startswith(f"reminder_{reminder_id}_") for name in files) == len(fired)
