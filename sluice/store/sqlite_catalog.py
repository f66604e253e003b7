"""What ``sluice copy-store`` needs of an SQLite transaction: the schema as it is
(tables, columns, keys, references) and bulk writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

from sluice.store.base import Row


class SqliteCatalog:
    """Mixed into ``SqliteTx``: copy-store's methods, on the transaction's connection."""

    _db: aiosqlite.Connection

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        raise NotImplementedError  # SqliteTx's

    # What pages through a table that has no primary key.
    row_address = "rowid"

    async def table_columns(self) -> list[tuple[str, str, int]]:
        """Every column of every table: (table, column, place in the primary key or 0)."""
        rows = await self.fetchall(
            "SELECT m.name, c.name, c.pk FROM sqlite_master AS m, pragma_table_info(m.name) AS c"
            " WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            " ORDER BY m.name, c.cid"
        )
        return [(str(table), str(column), int(pk)) for table, column, pk in rows]

    async def table_references(self) -> list[tuple[str, str]]:
        """(table, table it references) for every foreign key."""
        rows = await self.fetchall(
            'SELECT DISTINCT m.name, f."table"'
            " FROM sqlite_master AS m, pragma_foreign_key_list(m.name) AS f"
            " WHERE m.type = 'table'"
        )
        return [(str(table), str(parent)) for table, parent in rows]

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Row]) -> None:
        """Insert ``rows`` (values for ``columns``, in that order) into ``table``."""
        names = ", ".join(_quoted(c) for c in columns)
        marks = ", ".join("?" * len(columns))
        await self._db.executemany(f"INSERT INTO {_quoted(table)} ({names}) VALUES ({marks})", rows)

    async def reset_identities(self) -> None:
        """Nothing to do: an AUTOINCREMENT counter moves past every rowid inserted."""


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
