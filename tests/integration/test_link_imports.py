"""Link imports on a real ``imports`` worker: the upload published by the relay, the job
run by the group's consumer from the jobs stream, its links and ``LinkCreated`` events
committed, the upload gone; a second upload of the file creates nothing, and a
cancelled import stops and leaves its upload behind nowhere; one user's imports run one at
a time across workers while another user's runs meanwhile."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkCreated
from sluice.builtin.links.exports import chunks
from sluice.builtin.links.exports import jobs as job_rows
from sluice.builtin.links.imports import jobs
from sluice.builtin.links.imports.formats import parse
from sluice.consumers.consumer import Consumer
from sluice.events import decode
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.store import Store
from tests.link_helpers import OTHER, OTHER_TOKEN, OWNER, add_user

SAMPLES = Path(__file__).parent.parent / "data" / "imports"


async def upload(store: Store, data: bytes) -> str:
    parsed = parse(data)
    job, _ = await jobs.request_import(
        store, OWNER, data, parsed.format.name, len(parsed.drafts), "trace-import"
    )
    return job.id


async def finished(store: Store, job_id: str) -> job_rows.Job:
    async def done() -> bool:
        job = await jobs.get_job(store, job_id)
        return job is not None and job.finished

    await wait_for(done)
    job = await jobs.get_job(store, job_id)
    assert job is not None
    return job


async def result(store: Store, job_id: str, size: int) -> dict[str, object]:
    data = b"".join([bytes(part) async for part in chunks.read(store, job_id, 0, size)])
    document: dict[str, object] = json.loads(data)
    return document


async def test_a_worker_imports_a_file_and_a_second_upload_creates_nothing(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    store = resources.store
    await add_user(store)
    start_relay()
    start_worker("imports")
    data = (SAMPLES / "shlink.csv").read_bytes()

    first = await finished(store, await upload(store, data))
    assert first.status == "succeeded", first.error
    document = await result(store, first.id, first.cursor_bytes)
    assert (document["created"], document["existing"], document["invalid"]) == (3, 0, 0)
    links = await store.fetchall("SELECT code, owner_id FROM links ORDER BY code")
    assert len(links) == 3 and {owner for _, owner in links} == {OWNER}
    assert "Ab3dE" in {code for code, _ in links}
    events = [decode(e.payload) for e in await store.events_after(0, 1000)]
    created = {e.code for e in events if isinstance(e, LinkCreated)}
    assert created == {code for code, _ in links}
    assert await jobs.get_upload(store, first.id) is None  # removed once the job ended

    second = await finished(store, await upload(store, data))
    assert second.status == "succeeded", second.error
    again = await result(store, second.id, second.cursor_bytes)
    assert (again["created"], again["existing"]) == (0, 3)
    assert len(await store.fetchall("SELECT code FROM links")) == 3


async def test_a_cancelled_import_never_runs_and_its_upload_is_removed(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    store = resources.store
    await add_user(store)
    job_id = await upload(store, (SAMPLES / "yourls.csv").read_bytes())
    await job_rows.cancel(store, job_id, OWNER)
    assert await jobs.get_upload(store, job_id) is None
    start_relay()
    worker = start_worker("imports")

    async def acked() -> bool:
        return worker.counters.handled >= 1

    await wait_for(acked)
    job = await jobs.get_job(store, job_id)
    assert job is not None and job.status == "cancelled"
    assert await store.fetchall("SELECT code FROM links") == []


async def test_one_users_imports_run_one_at_a_time_and_another_users_runs_meanwhile(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    """Two workers: a user's three uploads are imported one after the other, whichever
    worker reads them (the group's flow), and another user's upload, made while the
    first of them runs, does not wait behind the other two."""
    store = resources.store
    await add_user(store)
    await add_user(store, OTHER, OTHER_TOKEN)
    start_relay()
    for name in ("w1", "w2"):
        start_worker("imports", name=name)

    def csv(tag: str, rows: int) -> bytes:
        lines = ["url,alias,expires_at,tags,title"]
        lines += [f"https://example.org/{tag}/{i},,,," for i in range(rows)]
        return "\n".join(lines).encode()

    mine = []
    for n in range(3):
        data = csv(f"a{n}", 1500)
        job, _ = await jobs.request_import(store, OWNER, data, "sluice", 1500, f"t-a{n}")
        mine.append(job.id)

    async def one_running() -> bool:
        rows = await store.fetchall("SELECT status FROM jobs WHERE status != 'queued'")
        return len(rows) > 0

    await wait_for(one_running, timeout=60)
    data = csv("lone", 10)
    lone, _ = await jobs.request_import(store, OTHER, data, "sluice", 10, "t-lone")
    for job_id in [*mine, lone.id]:
        assert (await finished(store, job_id)).status == "succeeded"
    rows = await store.fetchall("SELECT id, started_at, finished_at FROM jobs ORDER BY started_at")
    spans = [(started, done) for job_id, started, done in rows if job_id in mine]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "two of one user's at once"
    ended = {job_id: done for job_id, _, done in rows}
    assert ended[lone.id] < max(ended[job_id] for job_id in mine)
