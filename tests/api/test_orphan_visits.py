"""``GET /v1/admin/orphan-visits``: GETs of unknown codes, per day and the top codes, with
storage bounded per day (docs/guides/links.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, timedelta
from typing import Any, cast

import pytest

from sluice.app.assembly import create_app
from sluice.app.testing import wait_for
from sluice.builtin.links.http.keys import ORPHANS
from sluice.builtin.links.orphans import OrphanTally
from sluice.config import Config
from sluice.events import utcnow
from sluice.http.app_keys import STORE
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, problem
from tests.link_helpers import OWNER_TOKEN, add_link, add_user

TOKEN = "orphans-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
CAP = 3


@pytest.fixture
async def admin(aiohttp_client: AiohttpClient, make_config: Callable[..., Config]) -> Client:
    # A long flush interval: what the tests see was written by the read itself, unless
    # a test waits for the writer.
    config = make_config(admin_token=TOKEN, orphan_codes_per_day=CAP, orphan_flush_ms=60_000)
    return await aiohttp_client(create_app(config))


def _store(admin: Client) -> Store:
    assert admin.app is not None
    return admin.app[STORE]


def _tally(admin: Client) -> OrphanTally:
    assert admin.app is not None
    return admin.app[ORPHANS]


async def orphans(admin: Client, **query: str) -> dict[str, Any]:
    response = await admin.get("/v1/admin/orphan-visits", params=query, headers=ADMIN)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def visit(admin: Client, code: str, times: int = 1, method: str = "GET") -> None:
    for _ in range(times):
        response = await admin.request(method, f"/{code}", allow_redirects=False)
        assert response.status == 404, await response.text()


def today() -> date:
    return utcnow().astimezone(UTC).date()


async def stored_code_rows(store: Store) -> int:
    row = await store.fetchone("SELECT COUNT(*) FROM orphan_visit_codes")
    assert row is not None
    return int(row[0])


async def test_unknown_codes_are_counted_per_day_busiest_first(admin: Client) -> None:
    await visit(admin, "wp-login", 3)
    await visit(admin, "typo42")

    body = await orphans(admin)

    day = today()
    assert body["from"] == (day - timedelta(days=29)).isoformat()
    assert body["to"] == day.isoformat()
    assert body["total"] == 4
    assert len(body["days"]) == 30
    assert body["days"][-1] == {"date": day.isoformat(), "visits": 4}
    assert all(d["visits"] == 0 for d in body["days"][:-1])
    assert body["codes"] == [{"code": "wp-login", "visits": 3}, {"code": "typo42", "visits": 1}]
    assert body["other"] == 0
    # Counted once: reading again writes nothing twice.
    assert (await orphans(admin))["total"] == 4


async def test_days_and_codes_of_the_range_only(admin: Client) -> None:
    tally, now = _tally(admin), utcnow()
    for _ in range(2):
        tally.count("oldcode", now - timedelta(days=2))
    tally.count("newcode", now)
    tally.count("oldcode", now)

    two_days_ago = (today() - timedelta(days=2)).isoformat()
    body = await orphans(admin, **{"from": two_days_ago, "to": two_days_ago})
    assert body["days"] == [{"date": two_days_ago, "visits": 2}]
    assert body["total"] == 2
    assert body["codes"] == [{"code": "oldcode", "visits": 2}]

    everything = await orphans(admin, to=today().isoformat())
    assert [d["visits"] for d in everything["days"][-3:]] == [2, 0, 2]
    assert everything["codes"] == [
        {"code": "oldcode", "visits": 3},
        {"code": "newcode", "visits": 1},
    ]


async def test_known_links_head_and_odd_paths_are_not_orphans(admin: Client) -> None:
    store = _store(admin)
    await add_link(store, "offline", "https://example.org/a", disabled=True)
    await add_link(store, "bygone", "https://example.org/b", expires_at=utcnow() - timedelta(1))
    await add_link(store, "alive", "https://example.org/c")

    for code in ("offline", "bygone"):
        response = await admin.get(f"/{code}", allow_redirects=False)
        assert response.status == 410
    assert (await admin.get("/alive", allow_redirects=False)).status == 302
    await visit(admin, "nosuchcode", method="HEAD")
    await visit(admin, "ab")  # too short to be a code
    await visit(admin, "favicon.ico")  # not of a code's shape

    body = await orphans(admin)
    assert body["total"] == 0
    assert body["codes"] == []

    await visit(admin, "nosuchcode")
    assert (await orphans(admin))["codes"] == [{"code": "nosuchcode", "visits": 1}]


async def test_codes_beyond_the_cap_count_as_other(admin: Client) -> None:
    # Within one write: the tally keeps CAP codes, the rest is `other` at once.
    await visit(admin, "first1", 4)
    for n in range(CAP + 5):
        await visit(admin, f"flood{n:03}")

    body = await orphans(admin)
    assert body["total"] == 4 + CAP + 5
    assert len(body["codes"]) == CAP
    assert body["codes"][0] == {"code": "first1", "visits": 4}
    assert body["other"] == 6
    assert await stored_code_rows(_store(admin)) == CAP

    # Across writes: a stored code still counts; new ones find the day full.
    await visit(admin, "first1")
    await visit(admin, "latecomer", 10)
    body = await orphans(admin)
    assert body["total"] == 4 + CAP + 5 + 11
    assert body["codes"][0] == {"code": "first1", "visits": 5}
    assert "latecomer" not in {c["code"] for c in body["codes"]}
    assert body["other"] == 16
    assert await stored_code_rows(_store(admin)) == CAP


async def test_a_full_day_admits_its_busiest_new_codes(admin: Client) -> None:
    await visit(admin, "early1")
    await orphans(admin)  # written: the day holds one code, room for CAP - 1 more
    await visit(admin, "quiet1")
    await visit(admin, "loud01", 5)
    await visit(admin, "loud02", 3)

    body = await orphans(admin)
    assert {c["code"] for c in body["codes"]} == {"early1", "loud01", "loud02"}
    assert body["other"] == 1


async def test_old_days_are_purged(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    config = make_config(admin_token=TOKEN, orphan_retention_days=5, orphan_flush_ms=60_000)
    admin = await aiohttp_client(create_app(config))
    old = utcnow() - timedelta(days=6)
    _tally(admin).count("ancient", old)
    _tally(admin).count("recent", utcnow() - timedelta(days=5))

    body = await orphans(admin, **{"from": old.date().isoformat()})
    assert body["total"] == 1
    assert body["codes"] == [{"code": "recent", "visits": 1}]
    row = await _store(admin).fetchone(
        "SELECT COUNT(*) FROM orphan_visit_days WHERE day < ?",
        ((today() - timedelta(days=5)).isoformat(),),
    )
    assert row is not None and int(row[0]) == 0


async def test_the_writer_writes_without_a_read(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    admin = await aiohttp_client(create_app(make_config(orphan_flush_ms=20)))
    await visit(admin, "unread1", 2)

    async def written() -> bool:
        row = await _store(admin).fetchone("SELECT SUM(visits) FROM orphan_visit_codes")
        done = row is not None and row[0] is not None and int(row[0]) == 2
        return done and _tally(admin).pending == 0

    await wait_for(written)
    assert await stored_code_rows(_store(admin)) == 1


async def test_shutdown_writes_the_tally(
    aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    admin = await aiohttp_client(create_app(make_config(orphan_flush_ms=60_000)))
    store = _store(admin)
    tally = OrphanTally(store, interval=3600)
    tally.start()
    tally.count("atexit", utcnow())
    assert await stored_code_rows(store) == 0

    await tally.close()

    row = await store.fetchone("SELECT code, visits FROM orphan_visit_codes")
    assert row is not None and (str(row[0]), int(row[1])) == ("atexit", 1)


async def test_a_failed_write_keeps_its_counts(admin: Client) -> None:
    store = _store(admin)

    class Flaky:
        """The app's store, refusing every transaction while ``down``."""

        down = True

        def transaction(self) -> Any:
            if self.down:
                raise ConnectionError("the database is restarting")
            return store.transaction()

    flaky = Flaky()
    tally = OrphanTally(cast(Store, flaky), codes_per_day=2, interval=3600)
    now = utcnow()
    for code in ("seen-first", "seen-first", "second"):
        tally.count(code, now)
    assert not await tally.flush()
    for code in ("third", "seen-first"):  # the day already holds 2 codes: "third" is other
        tally.count(code, now)
    flaky.down = False

    assert await tally.flush()

    assert tally.pending == 0
    rows = await store.fetchall("SELECT code, visits FROM orphan_visit_codes ORDER BY code")
    assert [(str(code), int(visits)) for code, visits in rows] == [("second", 1), ("seen-first", 3)]
    day = await store.fetchone("SELECT visits, other FROM orphan_visit_days")
    assert day is not None and (int(day[0]), int(day[1])) == (5, 1)


async def test_admin_token_required(admin: Client) -> None:
    await problem(await admin.get("/v1/admin/orphan-visits"), 401)
    wrong = {"Authorization": "Bearer not-the-admin-token-0123456789"}
    await problem(await admin.get("/v1/admin/orphan-visits", headers=wrong), 401)
    await add_user(_store(admin))
    user = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    await problem(await admin.get("/v1/admin/orphan-visits", headers=user), 403)


@pytest.mark.parametrize(
    "query",
    [
        {"from": "yesterday"},
        {"to": "2026-13-01"},
        {"from": "2026-03-02", "to": "2026-03-01"},
        {"from": "2024-01-01", "to": "2026-01-01"},
    ],
)
async def test_bad_ranges_are_422(admin: Client, query: dict[str, str]) -> None:
    response = await admin.get("/v1/admin/orphan-visits", params=query, headers=ADMIN)
    await problem(response, 422)
