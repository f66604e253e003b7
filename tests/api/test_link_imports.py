"""CSV imports through the API: each format's sample file imported, a second import of it
creating nothing, invalid rows reported beside the created ones, and the refusals
(401, 413, 415, 422).

The job is run in process (the runner the ``imports`` workers call), so each
outcome is reached deterministically; ``tests/integration/test_link_imports.py``
runs one on a real worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.builtin.links.events import ImportRequested, LinkCreated
from sluice.builtin.links.settings import LinksSettings
from sluice.builtin.links.stored import Link
from sluice.config import Config
from sluice.store import Store
from tests.api.helpers import Client, problem, stored_events
from tests.api.import_helpers import CSV, imported, links_of, upload
from tests.link_helpers import OTHER, OTHER_TOKEN, OWNER, add_link, add_user, bearer

# SQLite only: CSV parsing and the job's API; the import job runs on both stores in
# tests/integration/test_link_imports.py.
pytestmark = pytest.mark.stores("sqlite")

SAMPLES = Path(__file__).parent.parent / "data" / "imports"
TAGS_STORED = "tags" in Link.__struct_fields__


@pytest.fixture
def config(make_config: Any) -> Config:
    return make_config(import_max_bytes=200_000)


def outcomes(document: dict[str, Any]) -> list[tuple[int, str, str | None]]:
    return [(row["row"], row["outcome"], row["code"]) for row in document["rows"]]


@pytest.fixture
async def owner(store: Store) -> None:
    await add_user(store)


@pytest.mark.usefixtures("owner")
async def test_an_upload_answers_202_with_a_queued_import_job(client: Client, store: Store) -> None:
    body = (SAMPLES / "sluice.csv").read_bytes()
    response = await upload(client, body)
    assert response.status == 202, await response.text()
    started = await response.json()
    assert response.headers["Location"] == started["status_url"]
    job = await (await client.get(f"/v1/jobs/{started['job_id']}", headers=bearer())).json()
    assert (job["kind"], job["status"], job["result_url"]) == ("import", "queued", None)
    events = [event for event, _ in await stored_events(store)]
    assert any(isinstance(e, ImportRequested) and e.job_id == job["id"] for e in events)
    again = await upload(client, body)  # the same file while its import is queued
    assert (await again.json())["job_id"] == started["job_id"]


@pytest.mark.usefixtures("owner")
@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("sluice", {"docs-start": "https://example.org/docs/getting-started"}),
        (
            "bitly",
            {
                "3Kx9QzA": "https://example.com/spring-sale",
                "4pQrStU": "https://example.com/blog/post-1",
            },
        ),
        ("yourls", {"ozh": "https://example.net/ozh", "yourls-docs": "https://example.net/docs"}),
        (
            "shlink",
            {"Ab3dE": "https://example.io/products", "news-2024": "https://example.io/news/2024"},
        ),
    ],
)
async def test_each_formats_sample_is_imported_once_for_its_uploader(
    client: Client, store: Store, config: Config, sample: str, expected: dict[str, str]
) -> None:
    await add_link(store, "theirs", "https://example.org/", owner=OTHER)
    body = (SAMPLES / f"{sample}.csv").read_bytes()
    document = await imported(client, store, config, body)
    assert document["format"] == sample
    assert [row["outcome"] for row in document["rows"]] == ["created"] * 3
    assert (document["created"], document["existing"], document["invalid"]) == (3, 0, 0)
    mine = await links_of(store, OWNER)
    assert len(mine) == 3  # every row a link of the uploader's, none of anyone else's
    for code, url in expected.items():  # codes from the other service kept as aliases
        assert mine[code] == (url, OWNER)
    for row in document["rows"]:
        assert row["short_url"] == f"{config.base_url}/{row['code']}"
        assert mine[row["code"]][0] == row["url"]
    created = [e for e, _ in await stored_events(store) if isinstance(e, LinkCreated)]
    assert {e.code for e in created if e.owner_id == OWNER} == set(mine)

    again = await imported(client, store, config, body)
    assert outcomes(again) == [(r, "existing", c) for r, _, c in outcomes(document)]
    assert await links_of(store, OWNER) == mine
    assert (again["created"], again["existing"]) == (0, 3)


@pytest.mark.usefixtures("owner")
async def test_codes_another_service_allowed_but_sluice_does_not_are_replaced_with_a_note(
    client: Client, store: Store, config: Config
) -> None:
    document = await imported(client, store, config, (SAMPLES / "yourls.csv").read_bytes())
    seven = document["rows"][1]
    assert seven["outcome"] == "created" and seven["code"] != "7"
    assert "'7'" in seven["reason"] and "new code" in seven["reason"]


@pytest.mark.usefixtures("owner")
async def test_tags_and_title_are_stored_or_reported_ignored(
    client: Client, store: Store, config: Config
) -> None:
    document = await imported(client, store, config, (SAMPLES / "shlink.csv").read_bytes())
    if TAGS_STORED:
        row = await store.fetchone("SELECT tags, title FROM links WHERE code = 'Ab3dE'")
        assert row is not None and (row[0], row[1]) == ("shop catalog", "Products")
        assert "tags" not in document["ignored_columns"]
    else:
        assert {"tags", "title"} <= set(document["ignored_columns"])


@pytest.mark.usefixtures("owner")
async def test_invalid_rows_are_reported_with_reasons_and_valid_ones_created(
    client: Client, store: Store, config: Config
) -> None:
    await add_link(store, "taken-alias", "https://example.org/", owner=OTHER)
    body = (
        "url,alias,expires_at\n"
        "https://example.org/ok,,\n"
        "javascript:alert(1),,\n"
        "https://example.org/a,taken-alias,\n"
        "https://example.org/b,ab,\n"
        "https://example.org/c,,2001-01-01T00:00:00Z\n"
        f"{config.base_url}/loop,,\n"
        "https://example.org/ok,,\n"
    ).encode()
    document = await imported(client, store, config, body)
    rows = document["rows"]
    assert [row["outcome"] for row in rows] == [
        "created",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "existing",
    ]
    reasons = [row["reason"] for row in rows]
    assert reasons[1].startswith("url:")
    assert reasons[2] == "alias: 'taken-alias' is taken"
    assert reasons[3].startswith("alias: must be 3 to 64")
    assert reasons[4] == "expires_at: must be in the future"
    assert reasons[5].startswith("url: must not point at this service")
    assert rows[6]["code"] == rows[0]["code"]  # the same URL again: one link
    assert list(await links_of(store, OWNER)) == [rows[0]["code"]]


async def test_uploads_need_a_token(client: Client, store: Store) -> None:
    response = await client.post("/v1/links/imports", data=b"url\nhttps://e.org/\n", headers=CSV)
    await problem(response, 401)


@pytest.mark.usefixtures("owner")
async def test_a_file_past_the_limit_is_413_and_a_large_one_under_it_is_taken(
    client: Client, config: Config
) -> None:
    line = b"https://example.org/" + b"x" * 80 + b"\n"
    big = b"url\n" + line * (LinksSettings.of(config).import_max_bytes // len(line) + 1)
    await problem(await upload(client, big), 413)
    # Past the 64 KiB every other route takes, within SLUICE_IMPORT_MAX_BYTES.
    fits = b"url\n" + line * (100_000 // len(line))
    assert (await upload(client, fits)).status == 202


@pytest.mark.usefixtures("owner")
@pytest.mark.parametrize(
    "content_type", ["application/json", "text/plain", "text/csv; charset=latin-1"]
)
async def test_another_content_type_is_415(client: Client, content_type: str) -> None:
    response = await upload(client, b"url\nhttps://e.org/\n", **{"Content-Type": content_type})
    await problem(response, 415)


@pytest.mark.usefixtures("owner")
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"", "empty"),
        (b"url\n", "no rows"),
        (b"name,address\nx,y\n", "no known format"),
        (b"url\nhttps://example.org/\xff\n", "not UTF-8"),
    ],
)
async def test_an_unreadable_file_is_422_and_queues_nothing(
    client: Client, store: Store, body: bytes, words: str
) -> None:
    body_json = await problem(await upload(client, body), 422)
    assert words in body_json["detail"]
    assert await store.fetchone("SELECT 1 FROM jobs") is None


@pytest.mark.usefixtures("owner")
async def test_another_users_import_job_is_404(client: Client, store: Store) -> None:
    await add_user(store, OTHER, OTHER_TOKEN)
    response = await upload(client, (SAMPLES / "sluice.csv").read_bytes())
    job_id = (await response.json())["job_id"]
    await problem(await client.get(f"/v1/jobs/{job_id}", headers=bearer(OTHER_TOKEN)), 404)
