"""The store a benchmark runs sluice on: SQLite in a data dir, or a private PostgreSQL.

``--store sqlite,postgres`` (any of the two, comma-separated) is parsed by
``parse_stores``; ``Stores`` starts one PostgreSQL server for the whole run
(``sluice.embedded.postgres_server.PostgresServer`` on a free loopback port, **fsync
on**: a benchmark measures durable commits; never the machine's own server
on 5432) and hands out a fresh database per measurement with ``env``.
SQLite gets a fresh data dir per measurement instead (``synchronous=FULL``).
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from sluice.embedded.postgres_server import PostgresServer, find_bindir

STORES = ("sqlite", "postgres")


def parse_stores(value: str) -> list[str]:
    stores = [s.strip() for s in value.split(",") if s.strip()]
    unknown = set(stores) - set(STORES)
    if unknown or not stores:
        raise SystemExit(f"--store: one or more of {', '.join(STORES)}, comma-separated")
    return stores


def postgres_version() -> str:
    try:
        out = subprocess.run(
            [str(find_bindir() / "postgres"), "--version"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    except Exception:
        return "?"
    found = re.search(r"\(PostgreSQL\) (\S+)", out)
    return found[1] if found else "?"


class Stores:
    """One private PostgreSQL server for the run (started only if asked for)."""

    def __init__(self, stores: list[str], *, fsync: bool = True) -> None:
        self.stores = stores
        self.fsync = fsync
        self.server: PostgresServer | None = None
        self._names = itertools.count(1)
        self._root: Path | None = None

    def __enter__(self) -> Stores:
        if "postgres" in self.stores:
            # As root the server runs as `nobody`: it needs a directory it can reach,
            # straight under /tmp (a TemporaryDirectory's children are not).
            self._root = Path(tempfile.mkdtemp(prefix="sluice-bench-pg-"))
            self.server = PostgresServer(self._root, fsync=self.fsync)
            self.server.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.server is not None:
            self.server.remove()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def env(self, store: str, data_dir: Path) -> dict[str, str]:
        """SLUICE_* settings for a fresh, empty store of kind ``store``."""
        env = {"SLUICE_DATA_DIR": str(data_dir)}
        if store == "postgres":
            assert self.server is not None
            env["SLUICE_DATABASE_URL"] = self.server.create_database(f"bench{next(self._names)}")
        return env

    def drop(self, env: dict[str, str]) -> None:
        """Drop the database ``env`` names (PostgreSQL), to keep the server's disk small."""
        url = env.get("SLUICE_DATABASE_URL", "")
        if self.server is not None and url:
            name = url.rsplit("/", 1)[-1]
            self.server.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def label(self) -> str:
        """For the machine line: which PostgreSQL, and fsync."""
        if self.server is None:
            return ""
        return (
            f"PostgreSQL {postgres_version()} (private server, fsync "
            f"{'on' if self.fsync else 'off'}, synchronous_commit on)"
        )
