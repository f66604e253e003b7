"""GET /v1/links/stats (docs/guides/links.md): the caller's links by visits over a range of UTC
days, the busiest first, up to `limit`; never another owner's; not taken for a link's code."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

from sluice.config import Config
from sluice.events import utcnow
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.api.link_helpers import record, visit
from tests.link_helpers import OTHER, OTHER_TOKEN, add_link, add_user, bearer


async def top(client: Client, query: str = "", token: str | None = None) -> dict[str, Any]:
    headers = bearer() if token is None else bearer(token)
    response = await client.get(f"/v1/links/stats{query}", headers=headers)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def ranking(body: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return [(link["code"], link["visits"], link["human"], link["bots"]) for link in body["links"]]


async def test_the_callers_links_come_busiest_first_over_the_range(
    client: Client, store: Store, config: Config
) -> None:
    for code in ("aaa111", "bbb222", "ccc333", "ddd444"):
        await add_link(store, code, f"https://example.org/{code}")
    await add_user(store)
    await add_user(store, OTHER, OTHER_TOKEN)
    await add_link(store, "zzz999", "https://example.org/theirs", owner=OTHER)
    await record(
        store,
        config,
        # aaa111: 3 visits on the 1st; bbb222: 1 on the 1st, 3 on the 5th (one by a bot);
        # ccc333: 1 on the 5th; ddd444 none; the other owner's link 10 on the 5th.
        *(visit("2026-03-01", f"v{i}", code="aaa111") for i in range(3)),
        visit("2026-03-01", "v0", code="bbb222"),
        *(visit("2026-03-05", f"v{i}", code="bbb222", is_bot=i == 0) for i in range(3)),
        visit("2026-03-05", "v0", code="ccc333"),
        *(visit("2026-03-05", f"v{i}", code="zzz999") for i in range(10)),
    )
    whole = await top(client, "?from=2026-03-01&to=2026-03-31")
    assert (whole["from"], whole["to"]) == ("2026-03-01", "2026-03-31")
    # Ties by code; the link without visits follows with zeros; never the other owner's.
    assert ranking(whole) == [
        ("bbb222", 4, 3, 1),
        ("aaa111", 3, 3, 0),
        ("ccc333", 1, 1, 0),
        ("ddd444", 0, 0, 0),
    ]
    first = whole["links"][0]
    assert (first["url"], first["title"]) == ("https://example.org/bbb222", None)

    fifth = await top(client, "?from=2026-03-05&to=2026-03-05&limit=2")
    assert ranking(fifth) == [("bbb222", 3, 2, 1), ("ccc333", 1, 1, 0)]
    first_day = await top(client, "?from=2026-03-01&to=2026-03-01&limit=1")
    assert ranking(first_day) == [("aaa111", 3, 3, 0)]
    theirs = await top(client, "?from=2026-03-01&to=2026-03-31", token=OTHER_TOKEN)
    assert ranking(theirs) == [("zzz999", 10, 10, 0)]


async def test_the_default_is_ten_links_of_the_last_30_days(client: Client, store: Store) -> None:
    for i in range(12):
        await add_link(store, f"link{i:02}", f"https://example.org/{i}")
    await add_user(store)
    body = await top(client)
    assert len(body["links"]) == 10
    assert {link["visits"] for link in body["links"]} == {0}
    today = utcnow().astimezone(UTC).date()
    assert (body["from"], body["to"]) == (str(today - timedelta(days=29)), str(today))
    assert len((await top(client, "?limit=100"))["links"]) == 12


async def test_bad_queries_are_422_naming_each_parameter(client: Client, store: Store) -> None:
    await add_user(store)
    for query, fields in (
        ("?limit=0", ["limit"]),
        ("?limit=101", ["limit"]),
        ("?limit=ten", ["limit"]),
        ("?from=2026-03-02&to=2026-03-01", ["from"]),
        ("?from=2024-01-01&to=2025-01-01", ["to"]),  # 367 days
        ("?from=03/01/2026&limit=0", ["from", "limit"]),
    ):
        response = await client.get(f"/v1/links/stats{query}", headers=bearer())
        body = await problem(response, 422)
        assert [e["field"] for e in body["errors"]] == fields, query
    await problem(await client.get("/v1/links/stats"), 401)


async def test_stats_is_no_link_code(client: Client, store: Store) -> None:
    await add_user(store)
    for alias in ("stats", "Stats"):
        response = await client.post(
            "/v1/links", json={"url": "https://example.org/", "alias": alias}, headers=bearer()
        )
        body = await problem(response, 422)
        assert [e["field"] for e in body["errors"]] == ["alias"]
