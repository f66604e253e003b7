"""The ``orders`` app object, its aggregates and its tables; the modules beside it
declare the rest on it."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from msgspec import Meta
from sluice.app import App, Config, Settings


class OrdersSettings(Settings, frozen=True, kw_only=True):
    """The app's own settings, each read from ``SLUICE_<NAME>`` when the app is loaded."""

    # How long a placed order waits for its payment, in seconds (the seed article's 15
    # minutes): SLUICE_ORDERS_CLOSE_AFTER_SECONDS.
    orders_close_after_seconds: Annotated[float, Meta(gt=0)] = 900.0


app = App(
    "orders",
    settings=OrdersSettings,
    description="orders closed after 15 minutes unless paid, with loyalty points",
)
app.aggregate("orders", key="order_id")
app.aggregate("loyalty", key="customer_id")

app.migration(
    1,
    "orders and loyalty points",
    """
    CREATE TABLE orders (
        id TEXT PRIMARY KEY,
        customer_id TEXT NOT NULL,
        total_cents INTEGER NOT NULL CHECK (total_cents > 0),
        status TEXT NOT NULL CHECK (status IN ('placed', 'paid', 'closed')),
        placed_at TEXT NOT NULL,
        closes_at TEXT NOT NULL,
        paid_at TEXT,
        closed_at TEXT
    ) WITHOUT ROWID;
    CREATE INDEX orders_customer ON orders (customer_id, id);
    CREATE TABLE loyalty_points (
        customer_id TEXT PRIMARY KEY,
        points INTEGER NOT NULL,
        updated_at TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE order_reconciliations (
        run_id TEXT PRIMARY KEY,
        checked_at TEXT NOT NULL,
        customers INTEGER NOT NULL,
        mismatched TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
)
# The orders became an ``Order`` aggregate (sluice_orders/order.py): their state is folded
# from their events, and the table that held it goes. Orders placed before have events
# but no versions: a deployment upgrading gives them theirs with `sluice aggregates adopt
# orders` after this migration (README.md, "Upgrade a deployment of the first version").
app.migration(2, "orders as an aggregate: the orders table goes", "DROP TABLE orders;")


def close_after(config: Config) -> timedelta:
    """How long a placed order waits for its payment in ``config``'s deployment."""
    return timedelta(seconds=OrdersSettings.of(config).orders_close_after_seconds)
