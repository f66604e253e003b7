"""What large uploads cost everyone else: ``sluice up`` (SQLite, its own Redis) in a
temporary data dir, then one of two measures. Issue 43, findings 1 and 5b.

``rss``: ``--sockets`` connections each send a CSV upload of ``--mib`` MiB to
``POST /v1/links/imports`` without an Authorization header, all of it but the last 10
bytes unless the server answers first, and hold it there. Printed: the RSS of the
``sluice up`` process (psutil) before and while they are held, and what the server did
with each upload. Before the route checked the token first, 30 of them took the
process from 210 to 509 MB.

``lock``: a user uploads ``--files`` CSVs of ``--mib`` MiB one after the other (each
accepted while the workers apply the ones before). Printed: how long each took to be
accepted, and the longest holds of SQLite's write lock by any store of the process, as
the store's own long-hold report measures them (``sluice.store.sqlite._HeldReport``,
from the lock taken to its release), with what held it.

    .venv/bin/python bench/uploads.py rss [--sockets 30] [--mib 10]
    .venv/bin/python bench/uploads.py lock [--files 2] [--mib 10]

Run the code of another checkout with ``PYTHONPATH=<that checkout>`` (the child
process inherits it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

# ``sluice up`` with every write-lock hold over 10 ms written to a file: the store's own
# measure (the report's start and the hold's end), with the holder's coroutine.
_MEASURED_UP = """
import json, sys
from sluice.store import sqlite
from sluice.__main__ import main
out = open(sys.argv[1], "a")
cancel = sqlite._HeldReport.cancel
def measured(self):
    held = self._loop.time() - self._since
    if held > 0.01:
        holder = self._holder.get_coro().__qualname__ if self._holder else None
        out.write(json.dumps({"held": held, "holder": holder}) + "\\n")
        out.flush()
    cancel(self)
sqlite._HeldReport.cancel = measured
sys.exit(main(["up"]))
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def healthy(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{url}/healthz") as answer:
                    if answer.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise SystemExit("sluice up did not answer /healthz within its deadline")


writers: list[asyncio.StreamWriter] = []


async def hold_upload(port: int, length: int) -> str:
    """Send all of an upload but its last 10 bytes, unless the server answers first;
    what the server did."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writers.append(writer)
    answer = asyncio.create_task(reader.read(200))
    head = (
        "POST /v1/links/imports HTTP/1.1\r\nHost: sluice\r\nContent-Type: text/csv\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()
    chunk = b"https://example.org/a-row-of-a-large-upload\n" * 1490  # ~64 KiB
    sent = 0
    with contextlib.suppress(ConnectionError):
        writer.write(head)
        while sent < length - 10 and not answer.done():
            part = chunk[: length - 10 - sent]
            writer.write(part)
            sent += len(part)
            await writer.drain()
    with contextlib.suppress(TimeoutError, ConnectionError):
        await asyncio.wait_for(asyncio.shield(answer), 0.5)
    written = f"{sent // 1024} KiB of body written to the socket"
    if not answer.done():
        answer.cancel()
        return f"held, unanswered, {written}"
    if answer.exception() is not None or not answer.result():
        return f"closed by the server, {written}"
    line = answer.result().split(b"\r\n", 1)[0].decode()
    return f"answered {line!r}, {written}"


def rss_mib(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / (1 << 20)


async def rss(pid: int, url: str, port: int, args: argparse.Namespace) -> None:
    before = rss_mib(pid)
    length = args.mib << 20
    outcomes = await asyncio.gather(*(hold_upload(port, length) for _ in range(args.sockets)))
    await asyncio.sleep(1)
    held = rss_mib(pid)
    print(
        f"sluice up RSS: {before:.0f} MiB before, {held:.0f} MiB with {args.sockets}"
        f" unauthenticated {args.mib} MiB uploads held (10 bytes short)"
    )
    for outcome in sorted(set(outcomes)):
        print(f"  {outcomes.count(outcome)} x {outcome}")
    for writer in writers:
        writer.close()


def csv_of(mib: int, tag: int) -> bytes:
    rows, size, n = ["url,title"], 10, 0
    while size < (mib << 20) - 100:
        rows.append(f"https://example.org/{tag}/page-{n:07d},Page {n}")
        size, n = size + len(rows[-1]) + 1, n + 1
    return ("\n".join(rows) + "\n").encode()


def _read_holds(path: Path) -> list[dict[str, Any]]:
    """The holds written since the last call."""
    seen = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("")
    return seen


async def lock(pid: int, url: str, port: int, args: argparse.Namespace) -> None:
    holds = Path(args.holds)
    async with aiohttp.ClientSession() as http:
        account = {"email": "bench@example.org", "password": "correct horse battery"}
        await http.post(f"{url}/v1/users", json=account)
        async with http.post(f"{url}/v1/tokens", json=account) as answer:
            token = (await answer.json())["token"]
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "text/csv"}
        files = [csv_of(args.mib, n) for n in range(args.files)]
        _read_holds(holds)  # those of the start and the sign-up go
        for body in files:
            started = time.monotonic()
            async with http.post(f"{url}/v1/links/imports", data=body, headers=headers) as up:
                took = time.monotonic() - started
                print(f"{len(body) / (1 << 20):.1f} MiB upload: {up.status} in {took:.2f} s")
        seen = _read_holds(holds)
    longest: dict[str, float] = {}
    for hold in seen:
        holder = str(hold["holder"])
        longest[holder] = max(longest.get(holder, 0.0), hold["held"])
    print("the longest write-lock hold of each holder while they were accepted:")
    for holder, held in sorted(longest.items(), key=lambda item: -item[1]):
        print(f"  {held * 1000:8.1f} ms  {holder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measure", choices=["rss", "lock"])
    parser.add_argument("--sockets", type=int, default=30)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--mib", type=int, default=10)
    args = parser.parse_args()
    port, data_dir = free_port(), tempfile.mkdtemp(prefix="sluice-uploads-")
    args.holds = os.path.join(data_dir, "holds.jsonl")
    env = {
        **os.environ,
        "SLUICE_DATA_DIR": data_dir,
        "SLUICE_PORT": str(port),
        "SLUICE_ADMIN_TOKEN": secrets.token_urlsafe(32),
        "SLUICE_LOG_LEVEL": "warning",
        "SLUICE_BODY_TIMEOUT_SECONDS": "120",  # the uploads are held, not timed out
    }
    command = [sys.executable, "-c", _MEASURED_UP, args.holds]
    up = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    measure = rss if args.measure == "rss" else lock

    async def run() -> None:
        await healthy(url, time.monotonic() + 60)
        await asyncio.sleep(2)  # the workers and the scheduler settle
        await measure(up.pid, url, port, args)

    try:
        asyncio.run(run())
    finally:
        up.terminate()
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:  # an import still running: no need to wait
            up.kill()
            up.wait()


if __name__ == "__main__":
    main()
