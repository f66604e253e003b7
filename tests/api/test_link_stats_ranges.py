"""docs/guides/links.md link statistics: every figure of GET /v1/links/{code}/stats follows the
range (totals, unique visitors, referrers, browsers, countries, OSes, devices), what a redirect
records about its client (device and OS from the User-Agent, country and visitor from the address a
trusted proxy forwards), and `sluice replay link-stats` giving the live answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.app.assembly import create_app, default_apps
from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.http.keys import VISITS
from sluice.config import Config
from sluice.http.app_keys import CONFIG, KEYS, REDIS, STORE
from sluice.process.resources import Resources
from sluice.projections.replay import rebuild
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, stored_events, user_token
from tests.api.link_helpers import CODE, GERMANY, NETHERLANDS, PROXY, at, create, record, visit
from tests.link_helpers import GOOGLEBOT, OTHER, add_link, add_user, bearer
from tests.user_agents import ANDROID_PHONE, IPAD, WINDOWS_CHROME


async def stats(client: Client, query: str, code: str = CODE) -> dict[str, Any]:
    response = await client.get(f"/v1/links/{code}/stats{query}", headers=bearer())
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


# Three days of visits: ada on the 1st and the 3rd, bob (a bot) on the 2nd, cy on the 3rd.
VISITS_OF_MARCH = (
    visit(
        "2026-03-01",
        "ada",
        referrer_host="t.co",
        browser="Chrome Mobile",
        country="DE",
        os="android",
        device="mobile",
    ),
    visit("2026-03-02", "bob", browser="Googlebot", is_bot=True, country="US"),
    visit("2026-03-02", "bob", browser="Googlebot", is_bot=True, country="US"),
    visit(
        "2026-03-03",
        "ada",
        referrer_host="t.co",
        browser="Chrome Mobile",
        country="DE",
        os="android",
        device="mobile",
    ),
    visit(
        "2026-03-03",
        "cy",
        referrer_host="news.example.com",
        browser="Chrome",
        country="NL",
        os="windows",
        device="desktop",
    ),
    visit("2026-03-03", "dee", browser="Mobile Safari", os="ios", device="tablet"),
)


async def test_every_figure_follows_the_range(client: Client, store: Store, config: Config) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)  # the owner's token
    await record(store, config, *VISITS_OF_MARCH)
    whole = await stats(client, "?from=2026-02-20&to=2026-03-31")
    assert (whole["from"], whole["to"]) == ("2026-02-20", "2026-03-31")
    assert (whole["total"], whole["human"], whole["bots"], whole["unique_visitors"]) == (6, 4, 2, 4)
    assert whole["countries"] == [
        {"country": "DE", "visits": 2},
        {"country": "US", "visits": 2},
        {"country": None, "visits": 1},
        {"country": "NL", "visits": 1},
    ]

    # The 3rd alone: ada, cy and dee; bob's bot visits and ada's first day are out.
    third = await stats(client, "?from=2026-03-03&to=2026-03-03")
    assert (third["total"], third["human"], third["bots"], third["unique_visitors"]) == (3, 3, 0, 3)
    assert third["days"] == [{"date": "2026-03-03", "visits": 3, "unique_visitors": 3}]
    assert third["referrers"] == [
        {"referrer": None, "visits": 1},
        {"referrer": "news.example.com", "visits": 1},
        {"referrer": "t.co", "visits": 1},
    ]
    assert third["browsers"] == [
        {"browser": "Chrome", "visits": 1},
        {"browser": "Chrome Mobile", "visits": 1},
        {"browser": "Mobile Safari", "visits": 1},
    ]
    assert third["countries"] == [
        {"country": None, "visits": 1},
        {"country": "DE", "visits": 1},
        {"country": "NL", "visits": 1},
    ]
    assert third["os"] == [
        {"os": "android", "visits": 1},
        {"os": "ios", "visits": 1},
        {"os": "windows", "visits": 1},
    ]
    assert third["devices"] == [
        {"device": "desktop", "visits": 1},
        {"device": "mobile", "visits": 1},
        {"device": "tablet", "visits": 1},
    ]

    # The 1st and 2nd: ada once, bob twice; unique visitors are distinct over the range.
    early = await stats(client, "?from=2026-03-01&to=2026-03-02")
    assert (early["total"], early["human"], early["bots"], early["unique_visitors"]) == (3, 1, 2, 2)
    assert early["os"] == [{"os": None, "visits": 2}, {"os": "android", "visits": 1}]
    assert early["browsers"] == [
        {"browser": "Googlebot", "visits": 2},
        {"browser": "Chrome Mobile", "visits": 1},
    ]
    # ada on the 1st and the 3rd is one visitor of the range, and one of each day.
    ada_days = await stats(client, "?from=2026-03-01&to=2026-03-03")
    assert ada_days["unique_visitors"] == 4
    assert [d["unique_visitors"] for d in ada_days["days"]] == [1, 1, 3]

    empty = await stats(client, "?from=2026-04-01&to=2026-04-02")
    assert (empty["total"], empty["unique_visitors"]) == (0, 0)
    assert empty["referrers"] == empty["countries"] == empty["os"] == empty["devices"] == []


async def test_a_visit_records_the_client_a_trusted_proxy_names(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(trusted_proxies=PROXY)))
    assert client.app is not None
    ada = await user_token(client)
    code = (await create(client, ada))["code"]
    clients = [
        (ANDROID_PHONE, GERMANY),
        (IPAD, NETHERLANDS),
        (WINDOWS_CHROME, None),  # no header: the peer, 127.0.0.1, which has no country
        (WINDOWS_CHROME, GERMANY),  # the same browser elsewhere: another visitor
        (GOOGLEBOT, NETHERLANDS),
    ]
    for user_agent, forwarded in clients * 2:  # the first GET takes the full path
        headers = {"User-Agent": user_agent}
        if forwarded:
            headers["X-Forwarded-For"] = f"203.0.113.9, {forwarded}"
        response = await client.get(f"/{code}", headers=headers, allow_redirects=False)
        assert response.status == 302
    app = client.app

    async def committed() -> bool:
        return app[VISITS].settled

    await wait_for(committed)
    visits = [e for e, _ in await stored_events(_store(client)) if isinstance(e, LinkVisited)]
    seen = [(v.country, v.os, v.device, v.is_bot) for v in visits]
    assert (
        seen
        == [
            ("DE", "android", "mobile", False),
            ("NL", "ios", "tablet", False),
            (None, "windows", "desktop", False),
            ("DE", "windows", "desktop", False),
            ("NL", None, None, True),
        ]
        * 2
    )
    # Full path and fast path hash a client alike; each client is its own visitor.
    assert [v.visitor for v in visits[:5]] == [v.visitor for v in visits[5:]]
    assert len({v.visitor for v in visits}) == 5
    await record(_store(client), app[CONFIG], *visits, stored=True)  # as the worker
    answer = await (await client.get(f"/v1/links/{code}/stats", headers=ada)).json()
    assert (answer["total"], answer["bots"], answer["unique_visitors"]) == (10, 2, 5)
    assert answer["countries"] == [
        {"country": "DE", "visits": 4},
        {"country": "NL", "visits": 4},
        {"country": None, "visits": 2},
    ]
    assert answer["os"] == [
        {"os": "windows", "visits": 4},
        {"os": None, "visits": 2},
        {"os": "android", "visits": 2},
        {"os": "ios", "visits": 2},
    ]
    assert answer["devices"] == [
        {"device": "desktop", "visits": 4},
        {"device": None, "visits": 2},
        {"device": "mobile", "visits": 2},
        {"device": "tablet", "visits": 2},
    ]


async def test_forwarded_headers_of_an_untrusted_peer_name_no_client(client: Client) -> None:
    assert client.app is not None
    ada = await user_token(client)  # the app trusts no proxy: every client is 127.0.0.1
    code = (await create(client, ada))["code"]
    for forwarded in (GERMANY, NETHERLANDS):
        headers = {"User-Agent": WINDOWS_CHROME, "X-Forwarded-For": forwarded}
        assert (await client.get(f"/{code}", headers=headers, allow_redirects=False)).status == 302
    app = client.app

    async def committed() -> bool:
        return app[VISITS].settled

    await wait_for(committed)
    visits = [e for e, _ in await stored_events(_store(client)) if isinstance(e, LinkVisited)]
    assert [v.country for v in visits] == [None, None]
    assert visits[0].visitor == visits[1].visitor


async def test_a_replay_answers_as_the_live_projection(
    client: Client, store: Store, config: Config
) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_link(store, "range2", "https://example.org/2")
    await add_user(store)  # the owner's token
    await add_user(store, OTHER)
    await add_link(store, "theirs", "https://example.org/3", owner=OTHER)
    await record(
        store,
        config,
        *VISITS_OF_MARCH,
        visit("2026-03-02", "eve", code="range2", country="FR", os="macos", device="desktop"),
        visit("2026-03-03", "eve", code="theirs"),
        LinkVisited(code="range2", visitor="old", occurred_at=at("2026-03-01")),  # no new fields
    )
    queries = [
        f"/v1/links/{CODE}/stats?from=2026-03-01&to=2026-03-31",
        f"/v1/links/{CODE}/stats?from=2026-03-02&to=2026-03-03",
        "/v1/links/range2/stats?from=2026-03-01&to=2026-03-02",
        "/v1/links/stats?from=2026-03-01&to=2026-03-31",
        "/v1/links/stats?from=2026-03-02&to=2026-03-02&limit=1",
    ]

    async def answers() -> list[Any]:
        bodies = [await (await client.get(q, headers=bearer())).json() for q in queries]
        return [{k: v for k, v in body.items() if k != "as_of"} for body in bodies]

    live = await answers()
    assert live[0]["total"] == 6 and live[3]["links"][1]["visits"] == 2
    # Damage every table, as a bug would, then rebuild from the history.
    async with store.transaction() as tx:
        for table in ("link_day_facets", "link_owner_days", "link_day_visitors"):
            await tx.execute(f"DELETE FROM {table}")
        await tx.execute("UPDATE link_stats_days SET bots = 0")
    assert await answers() != live
    assert client.app is not None
    app = client.app
    resources = Resources(config=app[CONFIG], store=store, redis=app[REDIS], keys=app[KEYS])
    result = await rebuild(
        resources, default_apps().projections["link-stats"], chunk=4, progress=False
    )
    assert result.events == 9
    assert await answers() == live


def _store(client: Client) -> Store:
    assert client.app is not None
    return client.app[STORE]
