"""GET /v1/links/{code}/stats: owner only, UTC day ranges, per-day unique visitors.

The projection is applied here in process to events made with chosen times, so
days, midnight boundaries and repeat visitors are exact and deterministic; the
integration tests drive the same numbers through real redirects and workers.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from sluice.app.assembly import default_apps
from sluice.builtin.links.events import LinkVisited
from sluice.config import Config
from sluice.events import utcnow
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.link_helpers import OTHER, OTHER_TOKEN, add_link, add_user, bearer

CODE = "stats1"


def at(day: str, clock: str = "12:00:00") -> datetime:
    return datetime.fromisoformat(f"{day}T{clock}+00:00")


def visited(when: datetime, visitor: str, **extra: Any) -> LinkVisited:
    return LinkVisited(code=CODE, visitor=visitor, occurred_at=when, **extra)


async def project(store: Store, config: Config, *events: LinkVisited) -> None:
    """Apply ``events`` as the link-stats worker would, in batches of two."""
    link_stats = default_apps().projections["link-stats"]
    for i in range(0, len(events), 2):
        async with store.transaction() as tx:
            await link_stats.apply(events[i : i + 2], tx, "", config)


async def get_stats(client: Client, query: str = "", token: str | None = None) -> Any:
    headers = bearer() if token is None else bearer(token)
    return await client.get(f"/v1/links/{CODE}/stats{query}", headers=headers)


async def test_days_unique_visitors_referrers_and_browsers(
    client: Client, store: Store, config: Config
) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    await project(
        store,
        config,
        visited(at("2026-03-01", "23:59:59.999"), "ada", referrer_host="news.example.com"),
        visited(at("2026-03-02", "00:00:00"), "ada", browser="Firefox"),  # next UTC day
        visited(at("2026-03-02"), "ada", browser="Firefox"),
        visited(at("2026-03-02"), "bob", is_bot=True, browser="Googlebot"),
        visited(at("2026-03-04"), "bob", is_bot=True, browser="Googlebot"),
        # 01:00 in UTC+02:00 is still 2026-03-03 23:00 UTC.
        visited(datetime.fromisoformat("2026-03-04T01:00:00+02:00"), "cy", referrer_host="t.co"),
    )
    response = await get_stats(client, "?from=2026-03-01&to=2026-03-05")
    assert response.status == 200
    body = await response.json()
    assert body["code"] == CODE
    assert (body["total"], body["human"], body["bots"], body["unique_visitors"]) == (6, 4, 2, 3)
    assert body["days"] == [
        {"date": "2026-03-01", "visits": 1, "unique_visitors": 1},
        {"date": "2026-03-02", "visits": 3, "unique_visitors": 2},
        {"date": "2026-03-03", "visits": 1, "unique_visitors": 1},
        {"date": "2026-03-04", "visits": 1, "unique_visitors": 1},
        {"date": "2026-03-05", "visits": 0, "unique_visitors": 0},
    ]
    assert body["referrers"] == [
        {"referrer": None, "visits": 4},
        {"referrer": "news.example.com", "visits": 1},
        {"referrer": "t.co", "visits": 1},
    ]
    assert body["browsers"] == [
        {"browser": "Firefox", "visits": 2},
        {"browser": "Googlebot", "visits": 2},
        {"browser": "Other", "visits": 2},
    ]
    as_of = datetime.fromisoformat(body["as_of"].replace("Z", "+00:00"))
    assert abs((utcnow() - as_of).total_seconds()) < 5


async def test_the_default_range_is_the_last_30_days(client: Client, store: Store) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    body = await (await get_stats(client)).json()
    today = utcnow().astimezone(UTC).date()
    assert [d["date"] for d in body["days"]] == [
        (today - timedelta(days=29 - i)).isoformat() for i in range(30)
    ]
    assert (body["total"], body["unique_visitors"], body["referrers"]) == (0, 0, [])
    only_to = await (await get_stats(client, "?to=2026-01-31")).json()
    assert (only_to["days"][0]["date"], len(only_to["days"])) == ("2026-01-02", 30)
    # Near the start of the calendar the default range has fewer days, not a 500.
    first_days = await get_stats(client, "?to=0001-01-05")
    assert first_days.status == 200
    days = [d["date"] for d in (await first_days.json())["days"]]
    assert days == ["0001-01-01", "0001-01-02", "0001-01-03", "0001-01-04", "0001-01-05"]


async def test_a_year_and_a_day_is_the_longest_range(client: Client, store: Store) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    first = date(2024, 1, 1)
    longest = first + timedelta(days=365)
    response = await get_stats(client, f"?from={first}&to={longest}")
    assert len((await response.json())["days"]) == 366
    too_long = await get_stats(client, f"?from={first}&to={longest + timedelta(days=1)}")
    body = await problem(too_long, 422)
    assert body["errors"][0]["field"] == "to"


async def test_bad_dates_are_422(client: Client, store: Store) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    for query, field in (
        ("?from=2026-13-01", "from"),
        ("?to=20260101", "to"),
        ("?from=yesterday", "from"),
        ("?from=2026-02-30", "from"),
        ("?from=2026-03-02&to=2026-03-01", "from"),
        ("?from=2026-W01-1", "from"),
    ):
        body = await problem(await get_stats(client, query), 422)
        assert [e["field"] for e in body["errors"]] == [field], query


async def test_only_the_owner_sees_the_stats(client: Client, store: Store) -> None:
    await add_link(store, CODE, "https://example.org/")
    await add_user(store)
    await add_user(store, OTHER, OTHER_TOKEN)
    missing = await client.get(f"/v1/links/{CODE}/stats")
    await problem(missing, 401)
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    await problem(await get_stats(client, token=OTHER_TOKEN), 404)
    await problem(await client.get("/v1/links/nosuch/stats", headers=bearer()), 404)
    # Not the owner: 404 even for a query that would be invalid.
    await problem(await get_stats(client, "?from=bad", token=OTHER_TOKEN), 404)
