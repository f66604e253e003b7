"""Orders on sluice, the seed articles' own example: an order is placed, closed after 15
minutes unless it is paid, and its payment credits loyalty points exactly once.

- ``POST /v1/orders`` commits the order with its ``OrderPlaced`` and a delayed job that
  closes it (``close-order``), all in one transaction;
- ``POST /v1/orders/{id}/payment`` commits the payment with its ``OrderPaid`` and
  cancels the job, in one transaction;
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
