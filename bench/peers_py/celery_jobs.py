"""Celery with its Redis broker: a no-op task, no result backend."""

from __future__ import annotations

import os

from celery import Celery
from counter import done

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379"))
app.conf.worker_hijack_root_logger = False


@app.task(ignore_result=True)
def noop() -> None:
    done()


async def produce(n: int, chunk: int) -> None:
    # One publish (an LPUSH) per message: the client has no bulk enqueue.
    for _ in range(n):
        noop.apply_async()
