"""``sluice api --processes N`` (``SLUICE_API_PROCESSES``): N API processes on one port.

One Python process serves HTTP on one core; N of them serve one port together with
``SO_REUSEPORT``, the kernel spreading new connections over their sockets. This
supervisor picks the port (binding it without listening, so a port of 0 becomes one
port all of them share and no other program takes it meanwhile), starts N
``sluice api`` children on it, and:

- restarts a child that dies, after a pause that doubles while children die young
  (0.1 s up to 5 s), so a child failing at start does not spin;
- on SIGTERM or SIGINT stops every child with SIGTERM, so each commits its buffered
  visits and finishes its requests as a single ``sluice api`` does, and kills what is
  still running after ``STOP_TIMEOUT`` seconds;
- is followed by its children if it is killed itself (``PR_SET_PDEATHSIG``: they get
  SIGTERM and stop gracefully).

The children share the data dir's metrics directory (prometheus-client's
multiprocess mode, ``sluice.telemetry.metrics_dir``), so one scrape of any of them reports the
requests of all; a dead child's live gauges are dropped (``mark_process_dead``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time

import structlog
from prometheus_client import multiprocess

from sluice.config import Config
from sluice.embedded.redis_server import die_with_parent
from sluice.telemetry.prometheus import multiprocess_dir

log = structlog.get_logger(__name__)

STOP_TIMEOUT = 30.0
YOUNG = 10.0  # a child that dies sooner than this after its start died young


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT`` and not listening: the
    children bind beside it; connections go only to listening sockets."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class Child:
    """One ``sluice api`` process of the supervisor."""

    def __init__(self, number: int, port: int) -> None:
        self.number = number
        self.port = port
        self.process: asyncio.subprocess.Process | None = None
        self.started = 0.0
        self.restarts = 0

    async def start(self) -> None:
        env = {**os.environ, "SLUICE_PORT": str(self.port), "SLUICE_API_PROCESSES": "1"}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sluice",
            "api",
            "--reuse-port",
            env=env,
            preexec_fn=die_with_parent(),
        )
        self.started = time.monotonic()
        log.info(
            "api process started", process=self.number, pid=self.process.pid, restarts=self.restarts
        )

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await process.wait()
        except TimeoutError:
            log.error("api process did not stop in time, killed", pid=process.pid)
            process.kill()
            await process.wait()


async def supervise(config: Config, stop: asyncio.Event) -> None:
    """Run ``config.api_processes`` API processes on one port until ``stop``."""
    reserved = reserve_port(config.host, config.port)
    port = int(reserved.getsockname()[1])
    children = [Child(number, port) for number in range(config.api_processes)]
    try:
        for child in children:
            await child.start()
        url = f"http://{config.host}:{port}"
        log.info("api processes started", url=url, docs=f"{url}/docs", processes=len(children))
        await _watch(children, stop)
    finally:
        await asyncio.gather(*(child.stop() for child in children))
        for child in children:
            _forget_metrics(child)
        reserved.close()
        log.info("api processes stopped", processes=len(children))


async def _watch(children: list[Child], stop: asyncio.Event) -> None:
    """Restart each child that exits, until ``stop``."""
    pause = 0.1
    stopping = asyncio.create_task(stop.wait())
    try:
        while not stop.is_set():
            exits = {asyncio.create_task(_exit_of(c)): c for c in children}
            await asyncio.wait({stopping, *exits}, return_when=asyncio.FIRST_COMPLETED)
            for task in exits:
                task.cancel()
            if stop.is_set():
                return
            for task, child in exits.items():
                if not task.done() or task.cancelled():
                    continue
                assert child.process is not None
                lived = time.monotonic() - child.started
                log.error(
                    "api process died, restarting",
                    process=child.number,
                    pid=child.process.pid,
                    code=child.process.returncode,
                    lived_s=round(lived, 1),
                )
                _forget_metrics(child)
                pause = 0.1 if lived >= YOUNG else min(pause * 2, 5.0)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await stop.wait()
                if stop.is_set():
                    return
                child.restarts += 1
                await child.start()
    finally:
        stopping.cancel()


async def _exit_of(child: Child) -> None:
    assert child.process is not None
    await child.process.wait()


def _forget_metrics(child: Child) -> None:
    directory = multiprocess_dir()
    if directory and child.process is not None and child.process.returncode is not None:
        multiprocess.mark_process_dead(child.process.pid, directory)  # type: ignore[no-untyped-call]
