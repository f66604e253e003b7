"""At most ``SLUICE_LINKS_PER_USER`` links per user, however they are made.

Issue 43, finding 5: one account could make links without bound, by hand or 350,000 at
a time from 10 MiB imports. ``POST /v1/links`` beyond the quota answers 403 (waiting
does not help: links are never deleted), and an import reports the rows beyond it as
invalid, with the reason, beside the rows it created. See docs/guides/security.md,
"Uploads".
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sluice.app.assembly import assemble
from sluice.builtin.links.settings import LinksSettings
from sluice.config import Config, load_config
from sluice.errors import ConfigError
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.api.import_helpers import imported, links_of
from tests.link_helpers import OTHER, OTHER_TOKEN, OWNER, add_link, add_user, bearer

QUOTA = 4


@pytest.fixture
def config(make_config: Any) -> Config:
    return make_config(links_per_user=QUOTA)


async def create(client: Client, n: int, token: str | None = None) -> Any:
    auth = bearer() if token is None else bearer(token)
    return await client.post("/v1/links", json={"url": f"https://example.org/{n}"}, headers=auth)


async def test_a_link_beyond_the_quota_is_403_and_creates_nothing(
    client: Client, store: Store
) -> None:
    await add_user(store)
    await add_user(store, OTHER, OTHER_TOKEN)
    for n in range(QUOTA):
        response = await create(client, n)
        assert response.status == 201, await response.text()
    body = await problem(await create(client, QUOTA), 403)
    assert f"you have {QUOTA} links" in body["detail"]
    assert "SLUICE_LINKS_PER_USER" in body["detail"]
    assert len(await links_of(store, OWNER)) == QUOTA
    theirs = await create(client, 0, OTHER_TOKEN)  # another user's quota is their own
    assert theirs.status == 201, await theirs.text()


async def test_links_created_at_the_same_time_cannot_pass_the_quota_together(
    client: Client, store: Store
) -> None:
    await add_user(store)
    responses = await asyncio.gather(*(create(client, n) for n in range(QUOTA + 4)))
    assert sorted(response.status for response in responses) == [201] * QUOTA + [403] * 4
    assert len(await links_of(store, OWNER)) == QUOTA


async def test_import_rows_beyond_the_quota_are_reported_invalid(
    client: Client, store: Store, config: Config
) -> None:
    await add_user(store)
    await add_link(store, "had-one", "https://example.org/had")
    rows = "\n".join(f"https://example.org/row-{n}" for n in range(QUOTA + 1))
    body = f"url\n{rows}\nhttps://example.org/row-0\n".encode()  # the last: a repeat
    document = await imported(client, store, config, body)
    outcomes = [(row["outcome"], row.get("reason")) for row in document["rows"]]
    assert [outcome for outcome, _ in outcomes] == ["created"] * (QUOTA - 1) + [
        "invalid",
        "invalid",
        "existing",
    ]
    for _, reason in outcomes[QUOTA - 1 : QUOTA + 1]:
        assert f"you have {QUOTA} links" in reason and "SLUICE_LINKS_PER_USER" in reason
    assert (document["created"], document["invalid"]) == (QUOTA - 1, 2)
    assert len(await links_of(store, OWNER)) == QUOTA


def test_the_quota_is_set_by_sluice_links_per_user_and_is_at_least_one() -> None:
    assert LinksSettings.of(load_config({})).links_per_user == 100_000
    assert LinksSettings.of(load_config({"SLUICE_LINKS_PER_USER": "5"})).links_per_user == 5
    with pytest.raises(ConfigError, match=r"SLUICE_LINKS_PER_USER .* app 'links'"):
        assemble(load_config({"SLUICE_LINKS_PER_USER": "0"}))
