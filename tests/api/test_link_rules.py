"""Redirect rules (docs/guides/links.md `rules`, issue 18) through the API: stored, answered and
carried by the events; each broken rule named by its path in one 422; and whom a redirect sends
where, by User-Agent, Accept-Language and the (forwarded) client address."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sluice.app.assembly import create_app
from sluice.builtin.links.events import LinkCreated, LinkUpdated
from sluice.config import Config
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, problem, user_token
from tests.api.link_helpers import GERMANY, NETHERLANDS, PROXY, create, link_events
from tests.user_agents import (
    ANDROID_TABLET,
    CURL,
    IPHONE,
    LINUX_FIREFOX,
    WINDOWS_CHROME,
)

HOME = "https://example.org/"

RULES = [
    {"when": {"os": "ios"}, "url": "https://apps.example/ios"},
    {"when": {"device": "tablet"}, "url": "https://example.org/tablet"},
    {"when": {"language": "de", "country": "DE"}, "url": "https://example.de/"},
    {"when": {"country": "NL"}, "url": "https://example.nl/"},
    {"when": {"language": "fr"}, "url": "https://example.fr/"},
    {"when": {"os": "windows", "device": "desktop"}, "url": "https://example.org/windows"},
]

# (User-Agent, Accept-Language, X-Forwarded-For) -> where the redirect goes.
VISITORS = [
    ((IPHONE, "fr", NETHERLANDS), "https://apps.example/ios"),  # the first match wins
    ((ANDROID_TABLET, None, None), "https://example.org/tablet"),
    ((LINUX_FIREFOX, "de-DE, en;q=0.5", GERMANY), "https://example.de/"),
    ((LINUX_FIREFOX, "en", GERMANY), HOME),  # German address, no German: none matches
    ((CURL, None, NETHERLANDS), "https://example.nl/"),
    ((LINUX_FIREFOX, "en-GB, fr;q=0.3", None), "https://example.fr/"),
    ((LINUX_FIREFOX, "fr;q=0", None), HOME),
    ((WINDOWS_CHROME, "en", None), "https://example.org/windows"),
    ((None, None, None), HOME),
]


def _headers(user_agent: str | None, language: str | None, forwarded: str | None) -> Any:
    headers = {
        "User-Agent": user_agent or "",
        "Accept-Language": language,
        "X-Forwarded-For": forwarded,
    }
    return {name: value for name, value in headers.items() if value is not None}


async def _locations(client: Client, code: str, headers: dict[str, str]) -> set[str]:
    """Where GET (the fast path once cached) and HEAD (always the full path) send these
    headers' client."""
    answers = [
        await client.get(f"/{code}", headers=headers, allow_redirects=False),
        await client.head(f"/{code}", headers=headers, allow_redirects=False),
    ]
    assert {answer.status for answer in answers} == {302}
    return {answer.headers["Location"] for answer in answers}


async def test_rules_are_stored_answered_everywhere_and_carried_by_the_events(
    client: Client, store: Store
) -> None:
    ada = await user_token(client)
    link = await create(client, ada, url=HOME, rules=RULES)
    assert link["rules"] == RULES  # absent conditions left out, as given
    code = link["code"]
    read = await (await client.get(f"/v1/links/{code}", headers=ada)).json()
    [listed] = (await (await client.get("/v1/links", headers=ada)).json())["items"]
    assert read["rules"] == listed["rules"] == RULES

    assert await _locations(client, code, {"Accept-Language": "fr"}) == {"https://example.fr/"}
    changed = [{"when": {"language": "pt"}, "url": "https://example.com.br/"}]
    response = await client.patch(f"/v1/links/{code}", json={"rules": changed}, headers=ada)
    assert (await response.json())["rules"] == changed
    assert await _locations(client, code, {"Accept-Language": "pt-BR"}) == {
        "https://example.com.br/"
    }
    cleared = await client.patch(f"/v1/links/{code}", json={"rules": None}, headers=ada)
    assert (await cleared.json())["rules"] == []
    assert await _locations(client, code, {"Accept-Language": "pt-BR"}) == {HOME}
    read = await (await client.get(f"/v1/links/{code}", headers=ada)).json()
    assert read["rules"] == []

    created, updated, emptied = [event for event, _ in await link_events(store)]
    assert isinstance(created, LinkCreated) and isinstance(updated, LinkUpdated)
    assert [rule.url for rule in created.rules] == [rule["url"] for rule in RULES]
    assert [(rule.when.language, rule.url) for rule in updated.rules] == [
        ("pt", "https://example.com.br/")
    ]
    assert emptied.rules == ()


async def test_the_first_matching_rule_picks_the_target(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    client = await aiohttp_client(create_app(make_config(trusted_proxies=PROXY)))
    ada = await user_token(client)
    code = (await create(client, ada, url=HOME, rules=RULES))["code"]
    for visitor, target in VISITORS:
        assert await _locations(client, code, _headers(*visitor)) == {target}, visitor
    plain = (await create(client, ada, url="https://example.org/plain"))["code"]
    assert await _locations(client, plain, _headers(IPHONE, "fr", NETHERLANDS)) == {
        "https://example.org/plain"
    }


async def test_a_forwarded_address_counts_only_from_a_trusted_proxy(client: Client) -> None:
    ada = await user_token(client)  # the app trusts no proxy: the client is 127.0.0.1
    code = (await create(client, ada, url=HOME, rules=RULES))["code"]
    assert await _locations(client, code, _headers(CURL, None, NETHERLANDS)) == {HOME}


async def test_each_broken_rule_is_named_by_its_path(client: Client) -> None:
    ada = await user_token(client)
    bad = [
        {"when": {"os": "beos", "country": "UK"}, "url": "ftp://example.org/"},
        {"when": {}, "url": "https://example.org/"},
        "https://example.org/",
        {"when": {"device": "mobile"}, "url": "https://example.org/", "weight": 2},
    ]
    expected = {
        "rules[0].when.os",
        "rules[0].when.country",
        "rules[0].url",
        "rules[1].when",
        "rules[2]",
        "rules[3].weight",
    }
    body = await problem(
        await client.post(
            "/v1/links", json={"url": HOME, "rules": bad, "title": "x" * 201}, headers=ada
        ),
        422,
    )
    assert {error["field"] for error in body["errors"]} == expected | {"title"}
    too_many = {"url": HOME, "rules": [RULES[0]] * 11}
    body = await problem(await client.post("/v1/links", json=too_many, headers=ada), 422)
    assert [error["field"] for error in body["errors"]] == ["rules"]
    not_a_list = {"url": HOME, "rules": "nope"}  # the body's shape: 400, as for any field
    body = await problem(await client.post("/v1/links", json=not_a_list, headers=ada), 400)
    assert [error["field"] for error in body["errors"]] == ["rules"]

    link = await create(client, ada, url=HOME, rules=RULES[:1])
    path = f"/v1/links/{link['code']}"
    body = await problem(await client.patch(path, json={"rules": bad}, headers=ada), 422)
    assert {error["field"] for error in body["errors"]} == expected
    assert (await (await client.get(path, headers=ada)).json())["rules"] == RULES[:1]
