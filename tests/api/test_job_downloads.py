"""Downloading an export's CSV from the database: length and validators, ranges and
conditions as RFC 9110 has them, a result over many chunks, and a process on another
data dir (another host, docs/guides/several-hosts.md) serving it."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sluice.app.assembly import create_app
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import chunks
from sluice.builtin.links.exports.retention import purge_finished
from sluice.builtin.links.exports.runner import run_export
from sluice.config import Config
from sluice.events import utcnow
from sluice.http.app_keys import STORE
from sluice.store import Store
from tests.api.helpers import AiohttpClient, Client, problem
from tests.api.job_helpers import CODE, deps, setup_links, start, stored_bytes
from tests.link_helpers import bearer

LONG_AGO = "Mon, 01 Jan 2001 00:00:00 GMT"
LATER = "Fri, 01 Jan 2100 00:00:00 GMT"


async def export_of(client: Client, store: Store, visits: int) -> str:
    """A queued export of ``CODE`` with ``visits`` visits (another link's in between)."""
    await setup_links(store)
    async with store.transaction() as tx:
        for i in range(visits):
            await tx.append(
                LinkVisited(code=CODE, visitor=f"visitor-{i}", referrer_host="t.co"),
                LinkVisited(code="theirs", visitor=f"other-{i}"),
            )
    job_id: str = (await start(client))["job_id"]
    return job_id


async def finished_export(client: Client, store: Store, config: Config, visits: int = 20) -> str:
    """The result URL of a succeeded export."""
    job_id = await export_of(client, store, visits)
    await run_export(job_id, deps(client, store, config))
    return f"/v1/jobs/{job_id}/result"


async def get(client: Client, url: str, **headers: str) -> Any:
    """GET with the owner's token; ``If_None_Match="x"`` sends ``If-None-Match: x``."""
    return await client.get(
        url, headers={**bearer(), **{k.replace("_", "-"): v for k, v in headers.items()}}
    )


async def test_the_csv_comes_with_its_length_validators_and_accept_ranges(
    client: Client, store: Store, config: Config
) -> None:
    url = await finished_export(client, store, config)
    response = await get(client, url)
    whole = await response.read()
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert int(response.headers["Content-Length"]) == len(whole)
    assert len(whole) == await stored_bytes(store, url.split("/")[3])
    assert response.headers["Accept-Ranges"] == "bytes"
    assert response.headers["ETag"].startswith('"') and response.headers["ETag"].endswith('"')
    assert response.headers["X-Trace-Id"]
    job = await (await get(client, url.removesuffix("/result"))).json()
    finished = datetime.fromisoformat(job["finished_at"].replace("Z", "+00:00"))
    assert response.headers["Last-Modified"] == format_datetime(finished, usegmt=True)
    assert len(list(csv.reader(io.StringIO(whole.decode())))) == 21

    head = await client.head(url, headers=bearer())
    assert (head.status, await head.read()) == (200, b"")
    assert head.headers["Content-Length"] == str(len(whole))
    assert head.headers["ETag"] == response.headers["ETag"]


async def test_a_download_resumes_with_a_range_and_a_bad_range_is_a_problem(
    client: Client, store: Store, config: Config
) -> None:
    url = await finished_export(client, store, config)
    whole = await (await get(client, url)).read()
    size = len(whole)

    part = await get(client, url, Range="bytes=10-")
    assert (part.status, part.headers["Content-Range"]) == (206, f"bytes 10-{size - 1}/{size}")
    assert part.headers["Content-Length"] == str(size - 10)
    assert await part.read() == whole[10:]
    closed = await get(client, url, Range="bytes=5-9")
    assert (closed.status, closed.headers["Content-Range"]) == (206, f"bytes 5-9/{size}")
    assert await closed.read() == whole[5:10]
    past_the_end = await get(client, url, Range=f"bytes=3-{size * 5}")
    assert (past_the_end.status, await past_the_end.read()) == (206, whole[3:])
    tail = await get(client, url, Range="bytes=-25")
    assert tail.status == 206
    assert tail.headers["Content-Range"] == f"bytes {size - 25}-{size - 1}/{size}"
    assert await tail.read() == whole[-25:]
    more_than_all = await get(client, url, Range=f"bytes=-{size * 2}")
    assert (more_than_all.status, await more_than_all.read()) == (206, whole)

    for value in (
        f"bytes={size}-",
        f"bytes={size + 100}-{size + 200}",
        "bytes=9-3",
        "bytes=-0",
        "bytes=0-1,5-6",
        "bytes=-",
        f"bytes={'9' * 5000}-",
    ):
        response = await get(client, url, Range=value)
        body = await problem(response, 416)
        assert response.headers["Content-Range"] == f"bytes */{size}"
        assert body["detail"]
    # A unit other than bytes is ignored, as RFC 9110 section 14.2 says: the whole CSV.
    for value in ("pages=1-2", "items=0-5", "bytesx=0-1", "none"):
        response = await get(client, url, Range=value)
        assert (response.status, await response.read()) == (200, whole), value
        assert "Content-Range" not in response.headers


async def test_conditions_answer_304_and_412_before_the_range_is_looked_at(
    client: Client, store: Store, config: Config
) -> None:
    url = await finished_export(client, store, config)
    whole = await get(client, url)
    etag, modified = whole.headers["ETag"], whole.headers["Last-Modified"]
    cases: list[tuple[dict[str, str], int]] = [
        ({"If_None_Match": etag}, 304),
        ({"If_None_Match": f"W/{etag}"}, 304),  # weak comparison
        ({"If_None_Match": f'"other", {etag}'}, 304),
        ({"If_None_Match": "*"}, 304),
        ({"If_None_Match": '"other"'}, 200),
        ({"If_Modified_Since": modified}, 304),
        ({"If_Modified_Since": LATER}, 304),
        ({"If_Modified_Since": LONG_AGO}, 200),
        ({"If_None_Match": '"other"', "If_Modified_Since": modified}, 200),  # the tag decides
        ({"If_Match": etag}, 200),
        ({"If_Match": "*"}, 200),
        ({"If_Match": f"W/{etag}"}, 412),  # strong comparison
        ({"If_Match": '"nope"'}, 412),
        ({"If_Unmodified_Since": LONG_AGO}, 412),
        ({"If_Unmodified_Since": modified}, 200),
        ({"If_Match": etag, "If_Unmodified_Since": LONG_AGO}, 200),  # the tag decides
        ({"If_Match": '"nope"', "If_None_Match": etag}, 412),  # 412 comes before 304
    ]
    for headers, status in cases:
        for with_range in (False, True):  # conditions come first (RFC 9110 13.2.2)
            ranged = {"Range": "bytes=100000-"} if with_range else {}
            response = await get(client, url, **headers, **ranged)
            if status == 412:
                await problem(response, 412)
                continue
            if status == 200 and with_range:
                await problem(response, 416)  # the conditions pass; the range does not
                continue
            assert response.status == status, (headers, with_range)
            if status == 304:
                assert (await response.read(), response.headers["ETag"]) == (b"", etag)
                assert response.headers["Last-Modified"] == modified


async def test_if_range_applies_the_range_only_to_the_version_it_names(
    client: Client, store: Store, config: Config
) -> None:
    url = await finished_export(client, store, config)
    response = await get(client, url)
    whole = await response.read()
    etag, modified = response.headers["ETag"], response.headers["Last-Modified"]
    for if_range, status in (
        (etag, 206),
        (modified, 206),  # the very version: the range applies
        (f"W/{etag}", 200),
        ('"other"', 200),
        (LONG_AGO, 200),
        (LATER, 200),
        ("soon", 200),
    ):
        answer = await get(client, url, Range="bytes=10-", If_Range=if_range)
        assert answer.status == status, if_range
        assert await answer.read() == (whole[10:] if status == 206 else whole)
    # A range the version named does not satisfy is never looked at: 200, the whole CSV.
    stale = await get(client, url, Range=f"bytes={len(whole)}-", If_Range=LONG_AGO)
    assert (stale.status, await stale.read()) == (200, whole)


async def test_a_result_over_many_chunks_is_served_whole_and_in_every_range(
    client: Client,
    store: Store,
    make_config: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 50)
    job_id = await export_of(client, store, 60)
    # Windows of 7 seq numbers: 3 or 4 visits each, more than one 50-byte chunk apiece.
    await run_export(job_id, deps(client, store, make_config(export_batch=7)))
    url = f"/v1/jobs/{job_id}/result"
    rows = await store.fetchall(
        "SELECT first_byte, data FROM export_chunks WHERE job_id = ? ORDER BY first_byte",
        (job_id,),
    )
    stored = b"".join(bytes(data) for _, data in rows)
    assert len(rows) > 20 and all(len(data) <= 50 for _, data in rows)
    ends = [first + len(data) for first, data in rows]
    assert [first for first, _ in rows] == [0, *ends[:-1]]  # one after the other, no gap

    whole = await (await get(client, url)).read()
    assert whole == stored
    visitors = [row[1] for row in csv.reader(io.StringIO(whole.decode()))][1:]
    assert visitors == [f"visitor-{i}" for i in range(60)]
    size = len(whole)
    for first in range(0, size, 41):
        for length in (1, 49, 50, 51, 333):
            last = min(first + length, size) - 1
            part = await get(client, url, Range=f"bytes={first}-{first + length - 1}")
            assert part.headers["Content-Range"] == f"bytes {first}-{last}/{size}"
            assert await part.read() == whole[first : last + 1]
    for suffix in (1, 50, 51, size - 1):
        assert await (await get(client, url, Range=f"bytes=-{suffix}")).read() == whole[-suffix:]


async def test_a_process_on_another_data_dir_builds_and_serves_the_result(
    client: Client,
    store: Store,
    config: Config,
    make_config: Any,
    aiohttp_client: AiohttpClient,
    tmp_path: Path,
) -> None:
    # Host B shares only the database (and Redis) with host A.
    elsewhere = make_config(data_dir=tmp_path / "host-b", database_url=config.database_url)
    host_b = await aiohttp_client(create_app(elsewhere))
    assert host_b.app is not None
    job_id = await export_of(client, store, 30)
    url = f"/v1/jobs/{job_id}/result"
    # Host B's exports worker builds it ...
    await run_export(job_id, deps(host_b, host_b.app[STORE], elsewhere))

    # ... and either host serves it, whole or in part.
    whole = await (await get(client, url)).read()
    assert len(list(csv.reader(io.StringIO(whole.decode())))) == 31
    from_b = await get(host_b, url)
    assert (from_b.status, await from_b.read()) == (200, whole)
    assert from_b.headers["ETag"] == (await get(client, url)).headers["ETag"]
    part = await get(host_b, url, Range="bytes=-10")
    assert (part.status, await part.read()) == (206, whole[-10:])
    for data_dir in (config.data_dir, elsewhere.data_dir):
        assert not (Path(data_dir) / "exports").exists()

    # A purge run anywhere removes it for every host.
    assert await purge_finished(host_b.app[STORE], utcnow() + timedelta(seconds=1), 0) == 1
    for host in (client, host_b):
        await problem(await get(host, url), 410)


async def test_a_result_purged_during_a_download_cuts_the_body_short(
    client: Client,
    store: Store,
    config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 64)
    url = await finished_export(client, store, config, visits=50)
    size = len(await (await get(client, url)).read())
    job_id = url.split("/")[3]
    read = chunks.read

    async def purged_after_the_first_chunk(*args: Any) -> AsyncGenerator[memoryview]:
        async for data in read(*args):
            yield data
            async with store.transaction() as tx:
                await chunks.delete(tx, job_id)

    monkeypatch.setattr(chunks, "read", purged_after_the_first_chunk)
    response = await get(client, url)
    assert (response.status, response.headers["Content-Length"]) == (200, str(size))
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()
    # The status line was out; a request after it finds the result gone.
    await problem(await get(client, url), 410)
