"""Redirects for clients whose User-Agent no cache has seen: answered, and counted as what
they are (docs/guides/security.md, "What a client costs the logs and the event loop")."""

from __future__ import annotations

from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.http.keys import VISITS
from sluice.http.app_keys import CONFIG, STORE
from tests.api.helpers import Client, stored_events, user_token
from tests.api.link_helpers import create, record
from tests.link_helpers import GOOGLEBOT
from tests.user_agents import ANDROID_PHONE, WINDOWS_CHROME, unseen


async def test_random_and_real_agents_are_answered_and_counted_as_what_they_are(
    client: Client,
) -> None:
    assert client.app is not None
    app = client.app
    ada = await user_token(client)
    code = (await create(client, ada))["code"]
    # 500 random characters each: no browser, no OS, no bot. Seeded: about one random
    # agent in a thousand holds a crawler's pattern (a short one such as "bot" by chance).
    strangers = unseen(20, seed=1)
    # A real agent past the first 256 characters is still told by them.
    padded = WINDOWS_CHROME + " " + "x" * 400
    agents = [*strangers, WINDOWS_CHROME, ANDROID_PHONE, GOOGLEBOT, padded]
    for agent in agents:
        response = await client.get(
            f"/{code}", headers={"User-Agent": agent}, allow_redirects=False
        )
        assert response.status == 302

    async def committed() -> bool:
        return app[VISITS].settled

    await wait_for(committed)
    visits = [e for e, _ in await stored_events(app[STORE]) if isinstance(e, LinkVisited)]
    seen = [(v.browser, v.is_bot, v.os, v.device) for v in visits]
    assert seen == [("Other", False, None, None)] * 20 + [
        ("Chrome", False, "windows", "desktop"),
        ("Chrome Mobile", False, "android", "mobile"),
        ("Googlebot", True, None, None),
        ("Chrome", False, "windows", "desktop"),
    ]
    await record(app[STORE], app[CONFIG], *visits, stored=True)  # as the link-stats worker
    stats = await (await client.get(f"/v1/links/{code}/stats", headers=ada)).json()
    assert (stats["total"], stats["bots"], stats["human"]) == (24, 1, 23)
    assert {b["browser"]: b["visits"] for b in stats["browsers"]} == {
        "Other": 20,
        "Chrome": 2,
        "Chrome Mobile": 1,
        "Googlebot": 1,
    }
    assert {o["os"]: o["visits"] for o in stats["os"]} == {None: 21, "windows": 2, "android": 1}
