"""Writes of many rows on a PostgreSQL transaction, each in as few statements as the
server allows: a binary ``COPY`` for plain inserts, one ``INSERT ... SELECT FROM
unnest(...)`` for upserts and for inserts that skip the rows already there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.store.base import Row, field_name, upsert_clause
from sluice.store.postgres_session import PostgresSession

# Each column's type as SQL (``bigint``, ``text``), for the casts of ``unnest`` arrays.
_COLUMN_TYPES = (
    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
    " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped"
)


class PostgresBulkWrites(PostgresSession):
    """Mixed into ``PostgresTx``: ``Tx.insert_rows``, ``upsert_rows`` and ``insert_new``."""

    _column_types: dict[str, dict[str, str]]  # the store's: table -> column -> type

    async def insert_rows(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """``COPY`` in binary: a quarter cheaper than an INSERT of ``unnest`` arrays."""
        if rows:
            conn = await self._session()
            await conn.copy_records_to_table(
                field_name(table), records=rows, columns=[field_name(c) for c in columns]
            )

    async def upsert_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        keys: Sequence[str],
        add: Sequence[str] = (),
        replace: Sequence[str] = (),
    ) -> None:
        """One ``INSERT ... SELECT FROM unnest(...)``: the rows go as one array per
        column, where ``executemany`` runs the statement once per row (the projections'
        upserts took two thirds of the server's statement time so)."""
        if rows:
            sql = await self._unnest_insert(table, columns)
            conn = await self._session()
            await conn.execute(
                sql + upsert_clause(table, keys, add, replace), *zip(*rows, strict=True)
            )

    async def insert_new(
        self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str
    ) -> list[Row]:
        """One ``INSERT ... SELECT FROM unnest(...)``, a single prepared statement for any
        number of rows (a multi-row VALUES was a new statement to parse and plan for each
        batch size)."""
        if not rows:
            return []
        sql = await self._unnest_insert(table, columns)
        sql += f" ON CONFLICT DO NOTHING RETURNING {returning}"
        conn = await self._session()
        return [tuple(r) for r in await conn.fetch(sql, *zip(*rows, strict=True))]

    async def _unnest_insert(self, table: str, columns: Sequence[str]) -> str:
        """``INSERT ... SELECT * FROM unnest(...)`` of one array per column, each cast to
        its column's type (read from the catalog once per table and store)."""
        types = self._column_types.get(table)
        if types is None:
            conn = await self._session()
            rows = await conn.fetch(_COLUMN_TYPES, field_name(table))
            types = self._column_types[table] = {str(c): str(t) for c, t in rows}
        arrays = ", ".join(f"${i}::{types[c]}[]" for i, c in enumerate(columns, 1))
        return (
            f"INSERT INTO {field_name(table)} ({', '.join(map(field_name, columns))})"
            f" SELECT * FROM unnest({arrays})"
        )
