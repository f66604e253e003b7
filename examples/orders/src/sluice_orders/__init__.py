"""Orders on sluice, the seed articles' own example: an order is placed, closed after 15
minutes unless it is paid, and its payment credits loyalty points exactly once.

- an order is an event-sourced ``Order`` aggregate (``order.py``), folded from its events;
- ``POST /v1/orders`` commits the order's ``OrderPlaced`` and a delayed job that closes
  it (``close-order``), in one transaction;
- ``POST /v1/orders/{id}/payment`` commits its ``OrderPaid`` and cancels the job, in one
  transaction; of payments racing, one saves and the others are 409s;
- the ``loyalty`` group credits points once per paid order (``@group.once``);
- the ``customer-totals`` projection keeps per-customer totals, rebuilt by
  ``sluice replay customer-totals``;
- the nightly ``reconcile-orders`` task checks the totals against the orders, with a
  run record like every sluice task.

Run it beside sluice's built-in apps: ``SLUICE_APPS=default,sluice_orders sluice up``, or
install this package (its ``sluice.apps`` entry point names it).
"""

from __future__ import annotations

from sluice_orders import jobs, loyalty, reconcile, routes, totals  # noqa: F401  (declare)
from sluice_orders.app import app

__all__ = ["app"]
