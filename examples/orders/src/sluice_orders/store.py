"""The app's reads of its own tables, and the one time format they are written in."""

from __future__ import annotations

from datetime import UTC, datetime

from sluice.app import Store, Tx

from sluice_orders.schemas import OrderOut

_COLUMNS = "id, customer_id, total_cents, status, placed_at, closes_at, paid_at, closed_at"


def db_time(moment: datetime) -> str:
    """A fixed-width UTC timestamp, so the database compares them as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _time(value: object) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def _order(row: tuple[object, ...]) -> OrderOut:
    id_, customer, total, status, placed, closes, paid, closed = row
    placed_at, closes_at = _time(placed), _time(closes)
    assert placed_at is not None and closes_at is not None
    return OrderOut(
        id=str(id_),
        customer_id=str(customer),
        total_cents=int(str(total)),
        status=str(status),
        placed_at=placed_at,
        closes_at=closes_at,
        paid_at=_time(paid),
        closed_at=_time(closed),
    )


async def order(store: Store, order_id: str) -> OrderOut | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM orders WHERE id = ?", (order_id,))
    return None if row is None else _order(row)


async def order_for_update(tx: Tx, order_id: str) -> OrderOut | None:
    """The order, its row locked until ``tx`` ends (PostgreSQL; SQLite's write
    transactions hold the whole database already)."""
    sql = f"SELECT {_COLUMNS} FROM orders WHERE id = ?" + tx.dialect.row_lock("update")
    row = await tx.fetchone(sql, (order_id,))
    return None if row is None else _order(row)
