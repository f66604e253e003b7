"""Export scan cost: filtering a link's visits in SQLite vs in Python, and whole exports.

Run by hand: ``.venv/bin/python bench/export_scan.py [N ...]`` (default 50000
250000 1000000). For each N it commits N ``LinkVisited`` events over 99 links,
among them ``rare`` (1% of the visits), ``tenth`` (10%) and ``half`` (50%), and
times for each of those three (best of three runs):

- ``sql``: windows of seq with ``json_extract(CAST(payload AS TEXT), '$.code') = ?``
  in the query, only matching payloads decoded in Python (what sluice does);
- ``python``: the same windows with only ``type = 'LinkVisited'`` in SQL, every
  payload decoded with msgspec and filtered in Python;
- ``export``: a whole export job through ``run_export`` (scan, CSV, fsync and a
  checkpoint per window of ``SLUICE_EXPORT_BATCH``, default 10000).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import msgspec

from sluice.app.assembly import open_resources
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.links.exports import jobs
from sluice.builtin.links.exports.runner import ExportDeps, run_export
from sluice.builtin.links.exports.visits import Visit
from sluice.config import load_config
from sluice.embedded.redis_server import RedisServer
from sluice.events import utcnow
from sluice.process.resources import Resources
from sluice.store import Store
from sluice.telemetry.logs import configure_logging

WINDOW = 10_000  # the default SLUICE_EXPORT_BATCH
SHARES = ("rare", "tenth", "half")
OWNER = "bench-user"


class _Code(msgspec.Struct):
    code: str = ""


def _code(i: int) -> str:
    if i % 2:
        return "half"  # 50% of the visits
    if i % 10 == 0:
        return "tenth"  # 10%
    return "rare" if i % 100 == 4 else f"c{i % 97}"  # 1%, and 96 links sharing the rest


async def seed(store: Store, n: int) -> None:
    now = utcnow().isoformat()
    async with store.transaction() as tx:
        await tx.execute(
            "INSERT INTO users (id, email, email_key, password_hash, created_at)"
            " VALUES (?, 'bench@example.org', 'bench@example.org', 'x', ?)",
            (OWNER, now),
        )
        for code in SHARES:
            await tx.execute(
                "INSERT INTO links (code, owner_id, url, created_at, updated_at)"
                " VALUES (?, ?, 'https://example.org/', ?, ?)",
                (code, OWNER, now, now),
            )
    for start in range(0, n, 5_000):
        async with store.transaction() as tx:
            await tx.append(
                *(
                    LinkVisited(
                        code=_code(i),
                        visitor=f"v{i}",
                        referrer_host="news.example.com",
                        browser="Chrome",
                    )
                    for i in range(start, min(n, start + 5_000))
                )
            )


async def scan_sql(store: Store, code: str, head: int) -> int:
    found = 0
    decoder = msgspec.json.Decoder(Visit)
    for lo in range(0, head, WINDOW):
        rows = await store.fetchall(
            "SELECT payload FROM events WHERE seq > ? AND seq <= ? AND type = 'LinkVisited'"
            " AND json_extract(CAST(payload AS TEXT), '$.code') = ? ORDER BY seq",
            (lo, lo + WINDOW, code),
        )
        found += len([decoder.decode(r[0]) for r in rows])
    return found


async def scan_python(store: Store, code: str, head: int) -> int:
    found = 0
    decoder = msgspec.json.Decoder(Visit)
    codes = msgspec.json.Decoder(_Code)
    for lo in range(0, head, WINDOW):
        rows = await store.fetchall(
            "SELECT payload FROM events WHERE seq > ? AND seq <= ? AND type = 'LinkVisited'"
            " ORDER BY seq",
            (lo, lo + WINDOW),
        )
        found += len([decoder.decode(r[0]) for r in rows if codes.decode(r[0]).code == code])
    return found


async def timed(label: str, head: int, run: Callable[[], Awaitable[int]], repeat: int = 3) -> None:
    """Best of ``repeat`` runs: the machine is shared, the minimum is the least disturbed."""
    best, found = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        found = await run()
        best = min(best, time.perf_counter() - started)
    print(f"  {label:<22} {best:6.2f} s  {head / best:>12,.0f} events/s  ({found} rows)")


async def export(res: Resources, code: str) -> int:
    """A fresh export job of ``code``, run to its end; the rows it wrote."""
    job, _ = await jobs.request_export(res.store, OWNER, code, "bench")
    await run_export(job.id, ExportDeps.from_resources(res))
    done = await jobs.get_job(res.store, job.id)
    return done.rows if done else -1


async def main(sizes: list[int]) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
            config = load_config(
                {},
                data_dir=Path(tmp) / "data",
                redis_url=server.url,
                log_level="warning",
                log_format="json",
            )
            configure_logging(config)
            async with open_resources(config) as res:
                await seed(res.store, n)
                head = await res.store.max_seq()
                print(f"{n:,} visits in the history")
                for code in SHARES:
                    await timed(
                        f"sql filter, {code}", head, partial(scan_sql, res.store, code, head)
                    )
                    await timed(
                        f"python filter, {code}", head, partial(scan_python, res.store, code, head)
                    )
                    await timed(f"whole export, {code}", head, partial(export, res, code))


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [50_000, 250_000, 1_000_000]))
