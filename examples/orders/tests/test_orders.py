"""The orders app end to end, on both stores: each guarantee sluice gives its own
capabilities, given to an app's through the public API."""

from __future__ import annotations

import json

from sluice.app.testing import sluice_command, wait_for

from tests.shop import Shop


async def test_a_paid_order_credits_points_once_and_an_unpaid_one_closes(running: Shop) -> None:
    shop = running
    paid = await shop.place("ada", 1234)
    unpaid = await shop.place("ada", 500)
    assert (paid["status"], unpaid["status"]) == ("placed", "placed")
    assert (await shop.pay(paid["id"]))["status"] == "paid"

    async def closed() -> bool:
        return bool((await shop.order(unpaid["id"]))["status"] == "closed")

    await wait_for(closed, timeout=30)  # its close-order job fell due two seconds on
    # The paid order's job was scheduled for the same moment and cancelled with the payment.
    assert (await shop.order(paid["id"]))["status"] == "paid"
    assert await shop.count("SELECT COUNT(*) FROM delayed_jobs") == 0

    async def settled() -> bool:
        totals = await shop.totals("ada")
        return bool((totals["paid"], totals["closed"], totals["points"]) == (1, 1, 12))

    await wait_for(settled, timeout=30)
    assert await shop.totals("ada") == {
        "customer_id": "ada", "placed": 2, "paid": 1, "closed": 1,
        "placed_cents": 1734, "paid_cents": 1234, "points": 12,
    }  # fmt: skip
    events = await shop.call("GET", "/v1/admin/events?type=PointsCredited", 401)
    assert events["status"] == 401  # the admin routes serve the app's events, for the admin


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
    assert await shop.count("SELECT COUNT(*) FROM orders") == 1
    assert await shop.count("SELECT COUNT(*) FROM events WHERE type = 'OrderPlaced'") == 1


async def test_the_app_is_in_the_openapi_document_and_its_groups_in_sluice_groups(
    shop: Shop,
) -> None:
    document = await shop.call("GET", "/openapi.json", 200)
    assert "post" in document["paths"]["/v1/orders/{order_id}/payment"]
    assert "OrderOut" in document["components"]["schemas"]
    listed = await sluice_command(shop.config, "groups", "list")
    assert listed.returncode == 0, listed.stderr
    names = {line.split()[0] for line in listed.stdout.splitlines()}
    assert {"loyalty", "customer-totals", "orders-jobs", "mail", "article-views"} <= names


async def test_a_replay_rebuilds_totals_equal_to_the_live_ones(running: Shop) -> None:
    shop = running
    for n in range(30):
        order = await shop.place(f"c{n % 4}", 100 + n)
        if n % 3:
            await shop.pay(order["id"])

    async def settled() -> bool:  # every order placed, the 10 unpaid ones closed
        closed = await shop.count("SELECT SUM(closed) FROM customer_totals")
        return await shop.count("SELECT SUM(placed) FROM customer_totals") == 30 and closed == 10

    await wait_for(settled, timeout=30)
    live = await shop.store.fetchall("SELECT * FROM customer_totals ORDER BY customer_id")
    async with shop.store.transaction() as tx:  # damage it: the replay must repair it
        await tx.execute("UPDATE customer_totals SET placed = 0, paid_cents = 7")
    replayed = await sluice_command(shop.config, "replay", "customer-totals", "--no-progress")
    assert replayed.returncode == 0, replayed.stderr
    assert "customer-totals: rebuilt from" in replayed.stdout
    rebuilt = await shop.store.fetchall("SELECT * FROM customer_totals ORDER BY customer_id")
    assert rebuilt == live


async def test_the_nightly_reconciliation_runs_with_a_run_record(running: Shop) -> None:
    shop = running
    order = await shop.place("dan", 4200)
    await shop.pay(order["id"])

    async def projected() -> bool:
        return await shop.count("SELECT SUM(paid) FROM customer_totals") == 1

    await wait_for(projected, timeout=30)
    done = await sluice_command(shop.config, "tasks", "run", "reconcile-orders")
    assert done.returncode == 0, done.stderr
    row = await shop.store.fetchone(
        "SELECT status, trigger FROM task_runs WHERE task = 'reconcile-orders'"
    )
    assert row is not None and tuple(row) == ("succeeded", "manual")
    kept = await shop.store.fetchone("SELECT customers, mismatched FROM order_reconciliations")
    assert kept is not None and (int(kept[0]), json.loads(kept[1])) == (1, [])
    listed = await sluice_command(shop.config, "tasks", "list")
    assert "reconcile-orders" in listed.stdout and "0 30 2 * * *" in listed.stdout
