"""The HTTP routes of the ``orders`` app, each beside its OpenAPI operation.

Each write commits the order's state, its event and its job in one transaction: an
answered 201 means the order, its ``OrderPlaced`` and its ``close-order`` job are all
durable; a failure leaves none of them.
"""

from __future__ import annotations

import re

import msgspec
from aiohttp import web
from sluice.app import (
    BAD_BODY,
    Conflict,
    FieldError,
    NotFound,
    Unprocessable,
    config,
    json_response,
    ok,
    problem,
    read_json,
    request_body,
    store,
    utcnow,
    uuid7,
)

from sluice_orders.app import app, close_after
from sluice_orders.events import OrderPaid, OrderPlaced
from sluice_orders.jobs import CloseOrder, close_order
from sluice_orders.schemas import CUSTOMER_ID, MAX_CENTS, CustomerTotals, OrderOut, PlaceOrder
from sluice_orders.store import db_time, order, order_for_update

_CUSTOMER_ID = re.compile(CUSTOMER_ID)
_ORDER_ID = {"name": "order_id", "in": "path", "required": True, "schema": {"type": "string"}}
_NO_ORDER = problem("no such order")


def _check(body: PlaceOrder) -> None:
    errors = []
    if not _CUSTOMER_ID.fullmatch(body.customer_id):
        errors.append(FieldError("customer_id", "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"))
    if not 1 <= body.total_cents <= MAX_CENTS:
        errors.append(FieldError("total_cents", f"must be from 1 to {MAX_CENTS}"))
    if errors:
        raise Unprocessable("invalid order", errors)


@app.route(
    "POST",
    "/v1/orders",
    doc={
        "operationId": "placeOrder",
        "summary": (
            "Place an order; it is closed after SLUICE_ORDERS_CLOSE_AFTER_SECONDS unless paid"
        ),
        "requestBody": request_body(PlaceOrder),
        "responses": {
            "201": ok(OrderOut, "the order, placed; `closes_at` says when it closes unpaid"),
            **BAD_BODY,
            "422": problem("a customer id or a total out of bounds"),
        },
    },
    structs=(PlaceOrder, OrderOut),
)
async def place_order(request: web.Request) -> web.Response:
    body = await read_json(request, PlaceOrder)
    _check(body)
    order_id, now = uuid7(), utcnow()
    closes_at = now + close_after(config(request))
    async with store(request).transaction() as tx:
        await tx.execute(
            "INSERT INTO orders (id, customer_id, total_cents, status, placed_at, closes_at)"
            " VALUES (?, ?, ?, 'placed', ?, ?)",
            (order_id, body.customer_id, body.total_cents, db_time(now), db_time(closes_at)),
        )
        await tx.append(
            OrderPlaced(
                order_id=order_id,
                customer_id=body.customer_id,
                total_cents=body.total_cents,
                closes_at=closes_at,
            )
        )
        await close_order.schedule(tx, CloseOrder(order_id=order_id), key=order_id, at=closes_at)
    placed = OrderOut(
        id=order_id,
        customer_id=body.customer_id,
        total_cents=body.total_cents,
        status="placed",
        placed_at=now,
        closes_at=closes_at,
    )
    return json_response(placed, 201)


@app.route(
    "GET",
    "/v1/orders/{order_id}",
    doc={
        "operationId": "getOrder",
        "summary": "An order",
        "parameters": [_ORDER_ID],
        "responses": {"200": ok(OrderOut, "the order"), "404": _NO_ORDER},
    },
    structs=(OrderOut,),
)
async def get_order(request: web.Request) -> web.Response:
    found = await order(store(request), request.match_info["order_id"])
    if found is None:
        raise NotFound("no such order")
    return json_response(found)


@app.route(
    "POST",
    "/v1/orders/{order_id}/payment",
    doc={
        "operationId": "payOrder",
        "summary": "Pay an order: its close-order job is cancelled, its points are credited once",
        "parameters": [_ORDER_ID],
        "responses": {
            "200": ok(OrderOut, "the order, paid"),
            "404": _NO_ORDER,
            "409": problem("the order was paid already, or closed unpaid"),
        },
    },
    structs=(OrderOut,),
)
async def pay_order(request: web.Request) -> web.Response:
    order_id, now = request.match_info["order_id"], utcnow()
    async with store(request).transaction() as tx:
        found = await order_for_update(tx, order_id)
        if found is None:
            raise NotFound("no such order")
        if found.status != "placed":
            raise Conflict(f"the order is {found.status}")
        await tx.execute(
            "UPDATE orders SET status = 'paid', paid_at = ? WHERE id = ?", (db_time(now), order_id)
        )
        await tx.append(
            OrderPaid(
                order_id=order_id,
                customer_id=found.customer_id,
                total_cents=found.total_cents,
            )
        )
        await close_order.cancel(tx, order_id)
    return json_response(msgspec.structs.replace(found, status="paid", paid_at=now))


@app.route(
    "GET",
    "/v1/customers/{customer_id}/totals",
    doc={
        "operationId": "customerTotals",
        "summary": (
            "A customer's orders and points (the customer-totals projection; seconds behind)"
        ),
        "parameters": [
            {"name": "customer_id", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {"200": ok(CustomerTotals, "the totals (zeros for a customer never seen)")},
    },
    structs=(CustomerTotals,),
)
async def customer_totals(request: web.Request) -> web.Response:
    customer_id = request.match_info["customer_id"]
    db = store(request)
    row = await db.fetchone(
        "SELECT placed, paid, closed, placed_cents, paid_cents FROM customer_totals"
        " WHERE customer_id = ?",
        (customer_id,),
    )
    points = await db.fetchone(
        "SELECT points FROM loyalty_points WHERE customer_id = ?", (customer_id,)
    )
    placed, paid, closed, placed_cents, paid_cents = (int(v) for v in row) if row else (0,) * 5
    totals = CustomerTotals(
        customer_id=customer_id,
        placed=placed,
        paid=paid,
        closed=closed,
        placed_cents=placed_cents,
        paid_cents=paid_cents,
        points=int(points[0]) if points else 0,
    )
    return json_response(totals)
