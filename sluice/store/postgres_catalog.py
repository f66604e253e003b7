"""What ``sluice copy-store`` needs of a PostgreSQL transaction: the schema as it is
(tables, columns, keys, references), bulk writes by COPY, identity sequences."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.store.base import Row
from sluice.store.postgres_session import PostgresSession

# For copy-store: the tables of the schema in use, their columns (generated ones left
# out: they cannot be written) and each column's place in the primary key (0: none).
_TABLE_COLUMNS = """
SELECT c.relname, a.attname, COALESCE(array_position(pk.conkey, a.attnum), 0)
FROM pg_class AS c
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_constraint AS pk ON pk.conrelid = c.oid AND pk.contype = 'p'
WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
  AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND a.attgenerated = ''
ORDER BY c.relname, a.attnum
"""
_TABLE_REFERENCES = """
SELECT DISTINCT c.relname, p.relname
FROM pg_constraint AS fk
JOIN pg_class AS c ON c.oid = fk.conrelid
JOIN pg_class AS p ON p.oid = fk.confrelid
WHERE fk.contype = 'f'
  AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
"""
# Identity and serial columns, quoted for SQL, and the column's plain name.
_IDENTITY_COLUMNS = """
SELECT quote_ident(c.relname), quote_ident(a.attname), a.attname
FROM pg_class AS c
JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
  AND c.relkind IN ('r', 'p')
  AND pg_get_serial_sequence(quote_ident(c.relname), a.attname) IS NOT NULL
"""


class PostgresCatalog(PostgresSession):
    """Mixed into ``PostgresTx``: copy-store's methods, on the transaction's connection."""

    # What pages through a table that has no primary key.
    row_address = "ctid"

    async def table_columns(self) -> list[tuple[str, str, int]]:
        """Every column of every table: (table, column, place in the primary key or 0)."""
        conn = await self._session()
        rows = await conn.fetch(_TABLE_COLUMNS)
        return [(str(table), str(column), int(pk)) for table, column, pk in rows]

    async def table_references(self) -> list[tuple[str, str]]:
        """(table, table it references) for every foreign key."""
        conn = await self._session()
        rows = await conn.fetch(_TABLE_REFERENCES)
        return [(str(table), str(parent)) for table, parent in rows]

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Row]) -> None:
        """Insert ``rows`` (values for ``columns``, in that order) into ``table``, by COPY."""
        conn = await self._session()
        await conn.copy_records_to_table(table, records=rows, columns=list(columns))

    async def reset_identities(self) -> None:
        """Move every identity (and serial) sequence past the largest value its column
        holds: rows written with their own numbers (``events.seq``) leave it behind."""
        conn = await self._session()
        for table, column, name in await conn.fetch(_IDENTITY_COLUMNS):
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence($1, $2), COALESCE(MAX({column}), 0) + 1,"
                f" false) FROM {table}",
                table,
                name,
            )
