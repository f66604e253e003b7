"""The orders app end to end in the harness: each guarantee sluice gives its own
capabilities, given to an app's through the public API."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from sluice.app.testing import Harness

from sluice_orders.app import close_after
from sluice_orders.events import OrderClosed, OrderPaid, OrderPlaced, PointsCredited
from tests.shop import APPS, Shop


async def test_a_paid_order_credits_points_once_and_an_unpaid_one_closes(shop: Shop) -> None:
    paid = await shop.place("ada", 1234)
    unpaid = await shop.place("ada", 500)
    assert (paid["status"], unpaid["status"]) == ("placed", "placed")
    assert (await shop.pay(paid["id"]))["status"] == "paid"
    await shop.h.drain()
    assert [e.order_id for e in await shop.h.handled("loyalty", OrderPaid)] == [paid["id"]]
    assert (await shop.order(unpaid["id"]))["status"] == "placed"  # its job is not due yet

    await shop.h.advance(close_after(shop.h.config))  # the close-order jobs fall due
    assert (await shop.order(unpaid["id"]))["status"] == "closed"
    # The paid order's job was due at the same moment: cancelled with the payment.
    assert (await shop.order(paid["id"]))["status"] == "paid"
    credited = await shop.h.events(PointsCredited)
    assert [(e.customer_id, e.order_id, e.points) for e in credited] == [("ada", paid["id"], 12)]
    assert [type(e) for e in await shop.h.handled("customer-totals")] == [
        OrderPlaced,
        OrderPlaced,
        OrderPaid,
        OrderClosed,
    ]
    assert await shop.totals("ada") == {
        "customer_id": "ada",
        "placed": 2,
        "paid": 1,
        "closed": 1,
        "placed_cents": 1734,
        "paid_cents": 1234,
        "points": 12,
    }
    events = await shop.call("GET", "/v1/admin/events?type=PointsCredited", 401)
    assert events["status"] == 401  # the admin routes serve the app's events, for the admin
    found = await shop.call("GET", "/v1/admin/events?type=PointsCredited", 200, admin=True)
    assert [e["event_id"] for e in found["items"]] == [credited[0].event_id]


async def test_paying_twice_or_after_closing_is_a_conflict_and_bad_input_a_4xx(shop: Shop) -> None:
    order = await shop.place("bob", 100)
    await shop.pay(order["id"])
    again = await shop.call("POST", f"/v1/orders/{order['id']}/payment", 409)
    assert again["detail"] == "the order is paid"
    await shop.call("POST", "/v1/orders/nope/payment", 404)
    await shop.call("GET", "/v1/orders/nope", 404)
    wrong = await shop.call("POST", "/v1/orders", 422, customer_id="a b", total_cents=0)
    assert {e["field"] for e in wrong["errors"]} == {"customer_id", "total_cents"}
    shape = await shop.call("POST", "/v1/orders", 400, customer_id="carol", total_cents="10")
    assert shape["errors"][0]["field"] == "total_cents"
    # Nothing of a refused order was written.
    assert len(await shop.h.events(OrderPlaced)) == 1
    late = await shop.place("bob", 200)
    await shop.h.advance(close_after(shop.h.config))
    closed = await shop.call("POST", f"/v1/orders/{late['id']}/payment", 409)
    assert closed["detail"] == "the order is closed"


async def test_the_app_is_in_the_openapi_document_and_its_groups_and_task_with_the_admin(
    shop: Shop,
) -> None:
    document = await shop.call("GET", "/openapi.json", 200)
    assert "post" in document["paths"]["/v1/orders/{order_id}/payment"]
    assert "OrderOut" in document["components"]["schemas"]
    await shop.place("dan", 100)
    await shop.h.drain()
    status = await shop.call("GET", "/v1/admin/streams", 200, admin=True)
    groups = {g["group"] for stream in status["streams"] for g in stream["groups"]}
    assert {"loyalty", "customer-totals", "orders-jobs", "mail", "article-views"} <= groups
    tasks = await shop.call("GET", "/v1/admin/tasks", 200, admin=True)
    assert {t["name"]: t["cron"] for t in tasks}["reconcile-orders"] == "0 30 2 * * *"


async def test_a_replay_rebuilds_totals_equal_to_the_live_ones(shop: Shop) -> None:
    for n in range(30):
        order = await shop.place(f"c{n % 4}", 100 + n)
        if n % 3:
            await shop.pay(order["id"])
    # Every order placed, the 10 unpaid ones closed.
    await shop.h.advance(close_after(shop.h.config))
    assert await shop.count("SELECT SUM(placed) FROM customer_totals") == 30
    assert await shop.count("SELECT SUM(closed) FROM customer_totals") == 10
    live = await shop.h.store.fetchall("SELECT * FROM customer_totals ORDER BY customer_id")
    async with shop.h.store.transaction() as tx:  # damage it: the replay must repair it
        await tx.execute("UPDATE customer_totals SET placed = 0, paid_cents = 7")
    assert await shop.h.replay("customer-totals") == 30 + 20 + 10
    rebuilt = await shop.h.store.fetchall("SELECT * FROM customer_totals ORDER BY customer_id")
    assert rebuilt == live


async def test_the_nightly_reconciliation_runs_with_a_run_record(shop: Shop) -> None:
    order = await shop.place("dan", 4200)
    await shop.pay(order["id"])
    await shop.h.drain()
    run = await shop.h.run_task("reconcile-orders")
    assert run.status == "succeeded"
    runs = await shop.call("GET", "/v1/admin/tasks/reconcile-orders/runs", 200, admin=True)
    assert [(r["id"], r["trigger"], r["status"]) for r in runs] == [(run.id, "manual", "succeeded")]
    kept = await shop.h.store.fetchone("SELECT customers, mismatched FROM order_reconciliations")
    assert kept is not None and (int(kept[0]), json.loads(kept[1])) == (1, [])


async def test_the_wait_for_payment_is_the_apps_own_setting(
    sluice_harness: Callable[..., Awaitable[Harness]],
) -> None:
    """``SLUICE_ORDERS_CLOSE_AFTER_SECONDS``, declared by the app (``OrdersSettings``) and
    given to the harness by its name, as sluice's own settings are; a value the app
    cannot use stops the harness naming the variable and the app."""
    shop = Shop(await sluice_harness(APPS, orders_close_after_seconds=60))
    order = await shop.place("ada", 700)
    await shop.h.advance(timedelta(seconds=61))
    assert (await shop.order(order["id"]))["status"] == "closed"
    with pytest.raises(Exception, match=r"SLUICE_ORDERS_CLOSE_AFTER_SECONDS .* 'orders'"):
        await sluice_harness(APPS, orders_close_after_seconds=0)
