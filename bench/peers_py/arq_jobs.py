"""arq: a no-op job; ``run_worker`` as its CLI would, without per-job log lines."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import run_worker
from counter import done

SETTINGS = RedisSettings.from_dsn(os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379"))


async def noop(ctx: dict[str, Any]) -> None:
    done()


class WorkerSettings:
    functions = [noop]  # noqa: RUF012 - arq reads these class attributes
    redis_settings = SETTINGS
    # arq sleeps poll_delay (0.5 s) between reads of at most max_jobs (10) jobs: with its
    # defaults a process finishes about 20 no-op jobs a second. Tuned for throughput instead.
    poll_delay = 0.005
    max_jobs = 100


def worker() -> None:
    run_worker(WorkerSettings)  # type: ignore[arg-type]


async def produce(n: int, chunk: int) -> None:
    pool = await create_pool(SETTINGS)
    for i in range(0, n, chunk):
        await asyncio.gather(*(pool.enqueue_job("noop") for _ in range(min(chunk, n - i))))
    await pool.aclose()
