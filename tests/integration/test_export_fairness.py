"""One account's exports do not hold back everyone else's (issue 20, finding 8).

80 exports requested by one user made another user's single export wait 20 s
behind them, where it took 0.4 s alone. Now a user has at most
``SLUICE_EXPORTS_PER_USER`` exports queued or running (the API's 429 is tested
in ``tests/api/test_export_limits.py``), and the ``exports`` group runs one
export of a user at a time across its consumers, users taking turns: here a worker
running one export at a time (per stream partition: it runs a consumer per
partition) finds two users' full queues and a third user's single export in its
backlog, requested last.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from itertools import zip_longest

import pytest

from sluice.app.testing import wait_for
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.exports.job_limits import TooManyJobs
from sluice.config import Config
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.integration.export_helpers import all_published
from tests.link_helpers import OTHER, OWNER, add_link

pytestmark = pytest.mark.topologies("single", "cluster")

THIRD = "user-third"
PER_USER = 3


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    # One export at a time: the order they run in is the order a user waits in.
    return make_config(worker_concurrency=1, exports_per_user=PER_USER, export_batch=200)


async def test_a_users_single_export_runs_before_other_users_queued_ones(
    resources: Resources, start_relay: Callable[..., Relay], start_worker: Callable[..., object]
) -> None:
    store = resources.store
    links = {OWNER: ["a1", "a2", "a3", "a4"], OTHER: ["c1", "c2", "c3"], THIRD: ["b1"]}
    for owner, codes in links.items():
        for code in codes:
            await add_link(store, code, f"https://example.org/{code}", owner=owner)
    async with store.transaction() as tx:  # some history for every export to scan
        await tx.append(*(LinkVisited(code="a1", visitor=f"v{i}") for i in range(1_000)))
    requested: dict[str, str] = {}  # job id -> link
    for owner, codes in links.items():
        for code in codes:
            try:
                job, created = await jobs.request_export(
                    store, owner, code, f"trace-{code}", per_user=PER_USER
                )
            except TooManyJobs:
                assert code == "a4"  # the owner's fourth at once
                continue
            assert created
            requested[job.id] = code
    assert sorted(requested.values()) == ["a1", "a2", "a3", "b1", "c1", "c2", "c3"]
    start_relay()
    await all_published(store)
    start_worker("exports")

    async def all_succeeded() -> bool:
        rows = await store.fetchall("SELECT status FROM jobs")
        return len(rows) == len(requested) and all(row[0] == "succeeded" for row in rows)

    await wait_for(all_succeeded, timeout=60)
    rows = await store.fetchall("SELECT id, started_at, finished_at FROM jobs ORDER BY finished_at")
    owner_of = {code: owner for owner, codes in links.items() for code in codes}
    # One user's exports run one at a time, across every partition's consumer: a user's
    # next starts when the one before finished.
    runs: dict[str, list[tuple[str, str]]] = {}
    for job_id, started, finished in rows:
        runs.setdefault(owner_of[requested[job_id]], []).append((started, finished))
    for owner, spans in runs.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), owner
    order = [requested[row[0]] for row in rows]
    if len(resources.keys.numbers) == 1:
        # First come first served would have run b1 last, after all six of the others.
        everyone = [(owner_of[code], code) for code in requested.values()]  # request order
        assert order == in_turns(everyone) == ["a1", "c1", "b1", "a2", "c2", "a3", "c3"]
    else:  # the partitions' consumers run at once, in no order within a user's: b1 still
        # ends before the last of each other user's
        last = [
            max(order.index(code) for code in codes if code in order)
            for codes in (links[OWNER], links[OTHER])
        ]
        assert order.index("b1") < min(last), order


def in_turns(requests: list[tuple[str, str]]) -> list[str]:
    """Links of (owner, link) requests in the order users taking turns runs them: every
    owner's first, then every owner's second...; owners in the order they first asked."""
    queues: dict[str, list[str]] = {}
    for owner, code in requests:
        queues.setdefault(owner, []).append(code)
    return [code for turn in zip_longest(*queues.values()) for code in turn if code is not None]


async def test_one_users_exports_run_one_at_a_time_and_another_users_runs_meanwhile(
    make_config: Callable[..., Config],
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., object],
) -> None:
    """Two workers that could run three exports at once each: a user's three run one
    after the other, whichever worker reads them (the group's flow), and another user's
    export, requested while the first of them runs, does not wait behind the other two."""
    store = resources.store
    config = make_config(worker_concurrency=3, exports_per_user=PER_USER, export_batch=50)
    busy = [f"busy{n}" for n in range(PER_USER)]
    for code in busy:
        await add_link(store, code, f"https://example.org/{code}", owner=OWNER)
    await add_link(store, "lone", "https://example.org/lone", owner=OTHER)
    async with store.transaction() as tx:  # a history each export scans in many windows
        await tx.append(*(LinkVisited(code=busy[i % 3], visitor=f"v{i}") for i in range(6_000)))
    start_relay()
    for name in ("w1", "w2"):
        start_worker("exports", name=name, config=config)
    mine = [
        (await jobs.request_export(store, OWNER, code, f"t-{code}", per_user=PER_USER))[0].id
        for code in busy
    ]

    async def one_running() -> bool:
        rows = await store.fetchall("SELECT status FROM jobs WHERE status != 'queued'")
        return len(rows) > 0

    await wait_for(one_running, timeout=60)
    lone, _ = await jobs.request_export(store, OTHER, "lone", "t-lone", per_user=PER_USER)

    async def all_succeeded() -> bool:
        rows = await store.fetchall("SELECT status FROM jobs")
        return len(rows) == PER_USER + 1 and all(row[0] == "succeeded" for row in rows)

    await wait_for(all_succeeded, timeout=120)
    rows = await store.fetchall("SELECT id, started_at, finished_at FROM jobs ORDER BY started_at")
    spans = [(started, finished) for job_id, started, finished in rows if job_id in mine]
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "two of one user's at once"
    finished = {job_id: done for job_id, _, done in rows}
    assert finished[lone.id] < max(finished[job_id] for job_id in mine)
