"""``sluice copy-store``: the whole store into an empty database of either backend.

Every table the source's schema holds is copied (the event history with its
``seq`` numbers, state, positions, projections), found in the catalog rather
than listed here, so tables later migrations add are copied too. The source
is read in one snapshot, so the copy and its counts agree even if something
still writes; the target is written in one transaction, checked before it
commits: a copy that fails leaves the target as empty as it was.

What differs between the backends (the catalog, bulk writes, snapshots,
identity sequences) are methods of theirs; ``CopyStore`` names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import graphlib
import re
import tempfile
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from sluice.config.database_url import SQLITE_PREFIX, is_postgres, redacted, sqlite_path
from sluice.errors import SluiceError
from sluice.store.base import Row
from sluice.store.migrate import Migration, apply_migrations
from sluice.store.migrations import MIGRATIONS
from sluice.store.sqlite import SqliteStore

# Rows per read and per write, at most; fewer when rows are large (export chunks reach
# 256 KiB each, history segments 5 MB), so that a batch holds about BATCH_BYTES. The
# first read of a table takes one row, and each next read at most GROWTH times the
# last, sized by the last SAMPLE rows read: a table of large rows is never read 100 at
# a time to find out how large they are.
BATCH = 10_000
BATCH_BYTES = 16 << 20
GROWTH = 10
SAMPLE = 100
# Seconds to wait for a PostgreSQL that does not answer: a copy is run by hand, and a
# wrong address should fail in seconds, not after the half minute a deployment waits.
OPEN_WAIT = 5.0
SCHEMA = "schema_migrations"
# Each database's own record of its schema, never copied: the target's says how its
# tables were made (schema_migrations_moved: see sluice.store.migrate).
OWN = frozenset({SCHEMA, "schema_migrations_moved"})
HISTORY = "events"
# The suffix ``sluice replay`` gives the tables it is building; after a replay they
# are renamed into place, so one still found was left by an interrupted replay.
GENERATION = re.compile(r"__r[0-9a-f]+$")


class CopyError(SluiceError):
    """The copy was refused or failed a check; the target holds nothing of it."""


class CopyTx(Protocol):
    """A transaction (or a read-only snapshot) on one backend, as the copy uses it."""

    row_address: str

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def table_columns(self) -> list[tuple[str, str, int]]: ...

    async def table_references(self) -> list[tuple[str, str]]: ...

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Row]) -> None: ...

    async def reset_identities(self) -> None: ...


class CopyStore(Protocol):
    def snapshot(self) -> AbstractAsyncContextManager[CopyTx]: ...

    def transaction(self) -> AbstractAsyncContextManager[CopyTx]: ...

    async def migrate(self, steps: Sequence[Migration] = ()) -> list[str]: ...

    async def refresh_statistics(self, *tables: str) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    # What the rows are paged by: the primary key, else the backend's row address.
    key: tuple[str, ...]

    @property
    def selected(self) -> tuple[str, ...]:
        return self.columns + tuple(k for k in self.key if k not in self.columns)

    def select(self, after: bool) -> str:
        """Reads the next ``?`` rows (after a key of ``?``s if ``after``), in key order."""
        key = ", ".join(map(quoted, self.key))
        where = f" WHERE ({key}) > ({', '.join('?' * len(self.key))})" if after else ""
        columns = ", ".join(map(quoted, self.selected))
        return f"SELECT {columns} FROM {quoted(self.name)}{where} ORDER BY {key} LIMIT ?"


@dataclass(frozen=True)
class CopyResult:
    tables: dict[str, int]  # rows copied, per table, in the order copied
    skipped: list[str]  # tables left over from an interrupted replay
    seconds: float

    @property
    def rows(self) -> int:
        return sum(self.tables.values())


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def copy_store(
    source_url: str,
    target_url: str,
    *,
    batch: int = BATCH,
    progress: bool = True,
    steps: Sequence[Migration],
) -> CopyResult:
    """Copy the store at ``source_url`` into the empty database at ``target_url``.

    The source is migrated as any command migrates it (sluice's schema and the apps'
    ``steps``); the target is checked for emptiness before anything is written to it,
    then migrated alike, then filled.
    """
    if not (is_postgres(target_url) or target_url.startswith(SQLITE_PREFIX)):
        raise CopyError(
            f"--to {redacted(target_url)!r}: expected postgresql://user:password@host:port/db"
            " or sqlite:///PATH"
        )
    source = await _open(source_url, migrate=True, steps=steps)
    try:
        async with source.snapshot() as snapshot:
            versions = await _versions(snapshot)
        unknown = versions - {version for version, _, _ in MIGRATIONS}
        if unknown:
            raise CopyError(
                f"the source's schema has version(s) {', '.join(map(str, sorted(unknown)))},"
                " newer than this sluice knows: copy with the sluice that wrote it"
            )
        seeded = await _seeded_rows(steps)
        target = await _open_target(target_url)
        try:
            async with target.snapshot() as before:
                await _refuse_unless_empty(before, seeded)
            await target.migrate(steps)
            return await _copy(source, target, versions, seeded, batch, progress)
        finally:
            await target.close()
    finally:
        await source.close()


async def _copy(
    source: CopyStore,
    target: CopyStore,
    versions: set[int],
    seeded: dict[str, int],
    batch: int,
    progress: bool,
) -> CopyResult:
    started = time.monotonic()
    async with source.snapshot() as snapshot, target.transaction() as tx:
        if await _versions(tx) != versions:
            raise CopyError("the target's schema version differs from the source's")
        holding = await _refuse_unless_empty(tx, seeded)
        tables, skipped = await _plan(snapshot, tx)
        counts = {t.name: await _count(snapshot, t.name) for t in tables}
        for name in reversed([t.name for t in tables if t.name in holding]):
            await tx.execute(f"DELETE FROM {quoted(name)}")  # the source's rows replace them
        copied: dict[str, int] = {}
        with tqdm(total=sum(counts.values()), unit="row", disable=not progress) as bar:
            for table in tables:
                bar.set_description(table.name)
                copied[table.name] = await _copy_table(snapshot, tx, table, batch, bar)
        await tx.reset_identities()
        await _verify(snapshot, tx, counts, copied)
    # A bulk load leaves no planner statistics: the first replay or export would scan.
    await target.refresh_statistics(*(t.name for t in tables))
    return CopyResult(copied, skipped, time.monotonic() - started)


async def _open(url: str, *, migrate: bool, steps: Sequence[Migration] = ()) -> CopyStore:
    if is_postgres(url):
        from sluice.store.postgres import PostgresStore  # asyncpg only where it is used

        return await PostgresStore.open(
            url, pool_size=2, migrate=migrate, wait=OPEN_WAIT, steps=steps
        )
    return await SqliteStore.open(sqlite_path(url), migrate=migrate, steps=steps)


async def _open_target(url: str) -> CopyStore:
    try:
        return await _open(url, migrate=False)
    except SluiceError:
        raise
    except Exception as exc:  # refused, no such database, authentication failed, not SQLite
        raise CopyError(f"cannot open the target {redacted(url)}: {exc}") from exc


async def _versions(tx: CopyTx) -> set[int]:
    return {int(row[0]) for row in await tx.fetchall(f"SELECT version FROM {SCHEMA}")}


async def _seeded_rows(steps: Sequence[Migration]) -> dict[str, int]:
    """Rows per table that migrations themselves write into a new database."""
    with tempfile.TemporaryDirectory(prefix="sluice-copy-") as scratch:
        fresh = await SqliteStore.open(Path(scratch) / "fresh.db", migrate=False)
        try:
            async with fresh.transaction() as tx:
                await apply_migrations(tx, steps)  # quietly: not what an operator cares about
            async with fresh.snapshot() as tx:
                counts = {name: await _count(tx, name) for name in await _table_names(tx)}
        finally:
            await fresh.close()
    return {name: n for name, n in counts.items() if n and name not in OWN}


async def _refuse_unless_empty(tx: CopyTx, seeded: dict[str, int]) -> list[str]:
    """Raise unless ``tx``'s database holds nothing but what migrations write; the
    tables holding such rows."""
    full, holding = [], []
    for name in await _table_names(tx):
        if name in OWN:
            continue
        allowed = seeded.get(name, 0)
        head = f"SELECT COUNT(*) FROM (SELECT 1 FROM {quoted(name)} LIMIT ?) AS head"
        rows = await _value(tx, head, (allowed + 1,))
        if rows > allowed:
            full.append(name)
        elif rows:
            holding.append(name)
    if full:
        raise CopyError(
            f"the target is not empty ({', '.join(full[:5])}{', ...' if len(full) > 5 else ''}"
            " hold rows); copy-store writes only into a new database, or one that nothing"
            " but `sluice migrate` has touched. Nothing was written."
        )
    return holding


async def _table_names(tx: CopyTx) -> list[str]:
    return sorted({table for table, _, _ in await tx.table_columns()})


async def _tables(tx: CopyTx) -> dict[str, Table]:
    columns: dict[str, list[str]] = {}
    keys: dict[str, list[tuple[int, str]]] = {}
    for table, column, place in await tx.table_columns():
        columns.setdefault(table, []).append(column)
        if place:
            keys.setdefault(table, []).append((place, column))
    return {
        name: Table(
            name, tuple(names), tuple(c for _, c in sorted(keys.get(name, []))) or (tx.row_address,)
        )
        for name, names in columns.items()
    }


async def _plan(snapshot: CopyTx, tx: CopyTx) -> tuple[list[Table], list[str]]:
    """The source's tables to copy, each after those it references; those skipped."""
    found = await _tables(snapshot)
    skipped = sorted(name for name in found if GENERATION.search(name))
    wanted = {n: t for n, t in found.items() if n not in OWN and n not in skipped}
    there = await _tables(tx)
    for table in wanted.values():
        if table.name not in there:
            raise CopyError(f"table {table.name} is in the source but not in the target's schema")
        missing = set(table.columns) - set(there[table.name].columns)
        if missing:
            raise CopyError(f"table {table.name}: the target lacks {', '.join(sorted(missing))}")
    graph: dict[str, set[str]] = {name: set() for name in sorted(wanted)}
    for child, parent in await snapshot.table_references():
        if child in wanted and parent in wanted and parent != child:
            graph[child].add(parent)
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise CopyError(f"foreign keys form a cycle: {exc.args[1]}") from exc
    return [wanted[name] for name in order], skipped


async def _count(tx: CopyTx, table: str) -> int:
    return await _value(tx, f"SELECT COUNT(*) FROM {quoted(table)}")


async def _value(tx: CopyTx, sql: str, params: Sequence[Any] = ()) -> int:
    row = await tx.fetchone(sql, params)
    return int(row[0]) if row else 0


async def _copy_table(
    snapshot: CopyTx, tx: CopyTx, table: Table, batch: int, bar: tqdm[Any]
) -> int:
    copied = 0
    async with contextlib.aclosing(_batches(snapshot, table, batch)) as batches:
        async for rows in batches:
            try:
                await tx.copy_rows(table.name, table.columns, rows)
            except Exception as exc:  # say which table; the transaction rolls back
                raise CopyError(f"copying {table.name}: {exc}") from exc
            copied += len(rows)
            bar.update(len(rows))
    return copied


async def _batches(snapshot: CopyTx, table: Table, size: int) -> AsyncGenerator[list[Row]]:
    """The table's rows in key order, ``size`` at a time, paged by key (never the whole
    table at once); the next read runs while the caller writes the last batch."""
    after = table.select(after=True)
    key_at = [table.selected.index(k) for k in table.key]
    width = len(table.columns)
    limit = 1
    pending: asyncio.Future[list[Row]] | None = asyncio.ensure_future(
        snapshot.fetchall(table.select(after=False), (limit,))
    )
    try:
        while pending is not None:
            rows, pending = await pending, None
            if len(rows) == limit:
                limit = min(_fitting(rows, size), limit * GROWTH)
                params = (*(rows[-1][i] for i in key_at), limit)
                pending = asyncio.ensure_future(snapshot.fetchall(after, params))
            if rows:
                yield rows if len(table.selected) == width else [r[:width] for r in rows]
    finally:
        if pending is not None:  # the copy failed: the read in flight is not wanted
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)


def _fitting(rows: list[Row], most: int) -> int:
    """How many rows like the last of ``rows`` make about ``BATCH_BYTES``; ``most`` at most."""
    sample = rows[-SAMPLE:]
    size = sum(len(v) if isinstance(v, str | bytes) else 8 for row in sample for v in row)
    return max(1, min(most, BATCH_BYTES * len(sample) // max(size, 1)))


async def _verify(
    snapshot: CopyTx, tx: CopyTx, counts: dict[str, int], copied: dict[str, int]
) -> None:
    """Raise, naming the table, unless the target holds what the source's snapshot does."""
    for name, expected in counts.items():
        there = await _count(tx, name)
        if not expected == copied[name] == there:
            raise CopyError(
                f"table {name}: {expected} rows in the source, {copied[name]} copied,"
                f" {there} in the target; nothing was committed"
            )
    if HISTORY in counts:
        head = f"SELECT COALESCE(MAX(seq), 0) FROM {HISTORY}"
        source_head, target_head = await _value(snapshot, head), await _value(tx, head)
        if source_head != target_head:
            raise CopyError(
                f"table {HISTORY}: max(seq) {source_head} in the source, {target_head} in"
                " the target; nothing was committed"
            )
