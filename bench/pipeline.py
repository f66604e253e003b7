"""End-to-end pipeline throughput: append -> relay -> article-views projection.

Run by hand: ``.venv/bin/python bench/pipeline.py [N]``. Starts its own Redis on
a free loopback port and a store in a temporary directory; prints events/s for
the append, the relay publish and the whole pipeline.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from sluice.config import load_config
from sluice.events import ArticleViewed
from sluice.groups import GROUPS
from sluice.logs import configure_logging
from sluice.processes import runtime_settings
from sluice.redis_server import RedisServer
from sluice.resources import open_resources, redis_client
from sluice.streams.consumer import Consumer
from sluice.streams.relay import Relay


async def main(n: int, log_level: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        config = load_config({}, data_dir=Path(tmp) / "data", redis_url=server.url,
                             log_level=log_level, log_format="json")  # fmt: skip
        configure_logging(config)
        async with open_resources(config) as res:
            started = time.perf_counter()
            for i in range(0, n, 500):
                async with res.store.transaction() as tx:
                    await tx.append(*(ArticleViewed(article_id=f"a{j % 50}", viewer=str(j))
                                      for j in range(i, min(n, i + 500))))  # fmt: skip
            appended = time.perf_counter()
            stop = asyncio.Event()
            relay = Relay(res.store, res.redis, res.keys, batch=config.relay_batch)
            reader = redis_client(config, socket_timeout=10)
            consumer = Consumer(GROUPS["article-views"](res), reader, res.keys, "bench",
                                runtime_settings(config))  # fmt: skip
            tasks = [asyncio.create_task(relay.run(stop)), asyncio.create_task(consumer.run(stop))]
            relayed_at = None
            while True:
                if relayed_at is None and relay.published >= n:
                    relayed_at = time.perf_counter()
                row = await res.store.fetchone("SELECT COALESCE(SUM(views), 0) FROM article_views")
                if row and row[0] >= n:
                    break
                await asyncio.sleep(0.01)
            done = time.perf_counter()
            stop.set()
            await asyncio.gather(*tasks)
            await reader.aclose()
    relayed_at = relayed_at or done
    print(f"events: {n}")
    print(f"append (500 per transaction): {n / (appended - started):,.0f} events/s")
    print(f"relay publish:                {n / (relayed_at - appended):,.0f} events/s")
    print(f"relay + project (1 worker):   {n / (done - appended):,.0f} events/s")


if __name__ == "__main__":
    # The second argument is the log level: "info" writes a line per handled event.
    asyncio.run(
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000, *(sys.argv[2:3] or ["warning"]))
    )
