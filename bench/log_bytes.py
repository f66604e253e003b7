"""Log bytes per redirect at the default level: ``sluice up``, N redirects, workers drained.

Run by hand: ``.venv/bin/python bench/log_bytes.py [N]`` (default 1,000). One ``sluice
up`` (embedded Redis, SQLite, every worker in the process) on a free port with JSON
logs at the default level (info); a user, a link, then N sequential ``GET /{code}`` with
a browser's User-Agent; the log is measured from just before the first redirect until the
link's stats count all N (polled every half second, each poll a request line of its own)
and three seconds more. What it prints: the bytes the process logged over that stretch,
and per redirect (issue 43, finding 8).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from sluice.embedded.redis_server import free_port

AGENT = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko)"
    " Chrome/120.0.0.0 Safari/537.36"
)
ACCOUNT = {"email": "bench@example.org", "password": "correct horse"}


async def started(session: aiohttp.ClientSession, base: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            async with session.get(f"{base}/healthz") as answer:
                if answer.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("sluice up did not answer /healthz within 120 s")


async def link(session: aiohttp.ClientSession, base: str) -> tuple[str, dict[str, str]]:
    """A user's token and a link's code."""
    async with session.post(f"{base}/v1/users", json=ACCOUNT) as answer:
        assert answer.status == 201, await answer.text()
    async with session.post(f"{base}/v1/tokens", json=ACCOUNT) as answer:
        auth = {"Authorization": f"Bearer {(await answer.json())['token']}"}
    async with session.post(
        f"{base}/v1/links", json={"url": "https://example.org/x"}, headers=auth
    ) as answer:
        return (await answer.json())["code"], auth


async def measure(n: int, base: str, log: Path) -> tuple[int, int | None]:
    """(bytes logged over n redirects and the drain, the stats' total at the end)."""
    async with aiohttp.ClientSession() as session:
        await started(session, base)
        code, auth = await link(session, base)
        await asyncio.sleep(3)  # the start's lines and the link's events settle
        first = os.path.getsize(log)  # noqa: ASYNC240 - a stat of a local file, once
        for _ in range(n):
            headers = {"User-Agent": AGENT}
            async with session.get(
                f"{base}/{code}", allow_redirects=False, headers=headers
            ) as answer:
                assert answer.status == 302
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and stats.get("total") != n:
            await asyncio.sleep(0.5)
            async with session.get(f"{base}/v1/links/{code}/stats", headers=auth) as answer:
                stats = await answer.json()
        await asyncio.sleep(3)  # the last batch's lines written
        return os.path.getsize(log) - first, stats.get("total")  # noqa: ASYNC240 - as above


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(SLUICE_DATA_DIR=f"{tmp}/data", SLUICE_PORT=str(port), SLUICE_LOG_FORMAT="json")
        log = Path(tmp) / "up.log"
        with log.open("wb") as out:
            up = subprocess.Popen(
                [sys.executable, "-m", "sluice", "up"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=out,
            )
        try:
            logged, total = asyncio.run(measure(n, f"http://127.0.0.1:{port}", log))
        finally:
            up.terminate()
            up.wait(60)
        print(
            f"{n:,} redirects, stats total {total}: {logged:,} bytes of log,"
            f" {logged / n:.1f} bytes per redirect"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=1000)
    main(parser.parse_args().n)
