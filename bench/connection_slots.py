"""One address holds many half-sent requests: what does another address get?

Run by hand: ``.venv/bin/python bench/connection_slots.py [--held 1100] [--probes 20]``.

One ``sluice api`` on its own Redis and store. From 127.0.0.3, ``--held`` connections
each send half a request head and nothing more (as a slowloris does); then, from
127.0.0.4, ``--probes`` ``GET /healthz`` and ``GET /{code}``, each on a connection of its
own, one after the other. Printed: the statuses they got and their latencies; and how
many of the held connections the API answered 503 at once. The defaults of the release
run: ``SLUICE_MAX_CONNECTIONS`` 1000, ``SLUICE_CONNECTIONS_PER_ADDRESS`` 100 (if the
sluice imported has it) and a head deadline of 30 s, longer than the run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from redirect import CODE, create_link, wait_listening

from sluice.embedded.redis_server import RedisServer, free_port
from sluice.http.connections import raise_file_limit

GREEDY, OTHER = "127.0.0.3", "127.0.0.4"


async def hold(port: int, count: int) -> tuple[list[asyncio.StreamWriter], int]:
    """``count`` connections from GREEDY with half a head each, and how many of them the
    API refused (a 503 read within 3 s of the last one opening)."""
    opened = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(GREEDY, 0))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: slu")
        opened.append((reader, writer))

    async def refused(reader: asyncio.StreamReader) -> bool:
        try:
            return (await asyncio.wait_for(reader.read(12), 3.0)).startswith(b"HTTP/1.1 503")
        except (TimeoutError, ConnectionError):
            return False

    answers = await asyncio.gather(*(refused(reader) for reader, _ in opened))
    return [writer for _, writer in opened], sum(answers)


async def probe(port: int, probes: int) -> list[tuple[str, int, float]]:
    """(path, status, seconds) of each probe from OTHER; status 0: the connection failed."""
    results = []
    for _ in range(probes):
        for path in ("/healthz", f"/{CODE}"):
            connector = aiohttp.TCPConnector(local_addr=(OTHER, 0), force_close=True)
            started = time.perf_counter()
            try:
                async with (
                    aiohttp.ClientSession(connector=connector) as http,
                    http.get(f"http://127.0.0.1:{port}{path}", allow_redirects=False) as answer,
                ):
                    status = answer.status
            except aiohttp.ClientError:
                status = 0
            results.append((path, status, time.perf_counter() - started))
    return results


async def run(port: int, held: int, probes: int) -> None:
    writers, refused = await hold(port, held)
    results = await probe(port, probes)
    print(f"held from {GREEDY}: {held} opened, {refused} answered 503 at once")
    for path in ("/healthz", f"/{CODE}"):
        mine = [r for r in results if r[0] == path]
        statuses = collections.Counter(status for _, status, _ in mine)
        seconds = sorted(s for _, _, s in mine)
        print(
            f"{path} from {OTHER}: statuses {dict(statuses)}; latency median"
            f" {statistics.median(seconds) * 1000:.1f} ms, max {seconds[-1] * 1000:.1f} ms"
        )
    for writer in writers:
        writer.close()


def main(args: argparse.Namespace) -> int:
    raise_file_limit(args.held + 256)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(
            SLUICE_DATA_DIR=str(Path(tmp) / "data"),
            SLUICE_REDIS_URL=server.url,
            SLUICE_LOG_FORMAT="json",
            SLUICE_LOG_LEVEL="warning",
            SLUICE_PORT=str(port),
            SLUICE_HEADER_TIMEOUT_SECONDS="30",
        )
        asyncio.run(create_link(env))
        with (Path(tmp) / "api.log").open("wb") as log:
            api = subprocess.Popen(
                [sys.executable, "-m", "sluice", "api"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        try:
            wait_listening(port, timeout=60)
            asyncio.run(run(port, args.held, args.probes))
        finally:
            api.send_signal(signal.SIGTERM)
            api.wait(60)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--held", type=int, default=1100)
    parser.add_argument("--probes", type=int, default=20)
    sys.exit(main(parser.parse_args()))
