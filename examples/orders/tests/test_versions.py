"""An app changes an event's shape: a history written by version 1 still builds what
version 2 expects, live (the group decodes the stream's old entries) and by replay."""

from __future__ import annotations

from typing import ClassVar

from sluice.app import Aggregate, adopt_history, applies, utcnow, uuid7

from sluice_orders.events import OrderPlaced
from tests import version_1
from tests.shop import Shop

# Customer, amount in euros as version 1 took it.
HISTORY = [("eve", 12.5), ("eve", 0.1), ("fay", 99.99), ("eve", 3.3)]


async def test_a_version_1_event_is_read_as_version_2(shop: Shop) -> None:
    old = version_1.OrderPlaced(order_id="o-1", customer_id="eve", amount=19.99, closes_at=utcnow())
    async with shop.h.store.transaction() as tx:  # as version 1 of the app committed it
        await tx.append(old)
    (event,) = await shop.h.events(OrderPlaced)
    assert isinstance(event, OrderPlaced)
    assert (event.v, event.total_cents, event.order_id) == (2, 1999, "o-1")
    assert event.event_id == old.event_id


async def test_a_version_1_history_builds_the_version_2_totals_live_and_by_replay(
    shop: Shop,
) -> None:
    async with shop.h.store.transaction() as tx:  # as version 1 of the app committed them
        await tx.append(
            *(
                version_1.OrderPlaced(order_id=uuid7(), customer_id=c, amount=a, closes_at=utcnow())
                for c, a in HISTORY
            )
        )
    await shop.place("eve", 700)  # and one by version 2
    await shop.h.drain()
    expected = [("eve", 4, 1250 + 10 + 330 + 700), ("fay", 1, 9999)]

    async def totals() -> list[tuple[str, int, int]]:
        rows = await shop.h.store.fetchall(
            "SELECT customer_id, placed, placed_cents FROM customer_totals ORDER BY customer_id"
        )
        return [(str(c), int(p), int(s)) for c, p, s in rows]

    assert await totals() == expected
    assert await shop.h.replay("customer-totals") == 5
    assert await totals() == expected


class OrderSavedByVersion1(Aggregate):
    """An order as version 1 of the app saved it: its ``OrderPlaced`` in euros."""

    aggregate: ClassVar[str] = "orders"

    @applies(version_1.OrderPlaced)
    def _placed(self, event: version_1.OrderPlaced) -> None:
        pass


async def test_an_order_saved_by_version_1_loads_through_the_upcaster(shop: Shop) -> None:
    old = OrderSavedByVersion1("o-1")
    old.record(
        version_1.OrderPlaced(order_id="o-1", customer_id="eve", amount=19.99, closes_at=utcnow())
    )
    async with shop.h.store.transaction() as tx:
        await old.save(tx)
    order = await shop.order("o-1")  # the Order aggregate, folded from the stored version 1
    assert (order["status"], order["total_cents"]) == ("placed", 1999)
    assert (await shop.pay("o-1"))["status"] == "paid"  # and its next version saves


async def test_orders_placed_before_the_aggregate_load_once_adopted(shop: Shop) -> None:
    placed = version_1.OrderPlaced(
        order_id="o-9", customer_id="eve", amount=5.0, closes_at=utcnow()
    )
    async with shop.h.store.transaction() as tx:  # appended, as before the Order aggregate
        await tx.append(placed)
    await shop.call("GET", "/v1/orders/o-9", 404)  # no version: the aggregate sees nothing

    adoption = await adopt_history(shop.h.store, "orders")  # `sluice aggregates adopt orders`

    assert (adoption.ids, adoption.events) == (1, 1)
    assert (await shop.order("o-9"))["total_cents"] == 500
    assert (await shop.pay("o-9"))["status"] == "paid"  # saved at version 2
    assert (await adopt_history(shop.h.store, "orders")).ids == 0
