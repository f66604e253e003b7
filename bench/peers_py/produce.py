"""Enqueue N no-op jobs of one peer; prints the wall times around the enqueue loop as JSON.

``python produce.py PEER N`` with ``BENCH_REDIS_URL`` set, from this directory.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time


def main(peer: str, n: int, chunk: int = 100) -> None:
    module = importlib.import_module(f"{peer}_jobs")
    started = time.time()
    asyncio.run(module.produce(n, chunk))
    print(json.dumps({"start": started, "end": time.time()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
