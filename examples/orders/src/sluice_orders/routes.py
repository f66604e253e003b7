"""The HTTP routes of the ``orders`` app, each beside its OpenAPI operation.

Each write saves the ``Order`` aggregate's new event and its job in one transaction: an
answered 201 means the ``OrderPlaced`` and its ``close-order`` job are both durable; a
failure leaves neither. Two payments of one order racing: the first saves, the other
finds the order moved on (``VersionConflict``) or already paid, a 409 either way.
"""

from __future__ import annotations

import re

from aiohttp import web
from sluice.app import (
    BAD_BODY,
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
from sluice_orders.jobs import CloseOrder, close_order
from sluice_orders.order import Order
from sluice_orders.schemas import CUSTOMER_ID, MAX_CENTS, CustomerTotals, OrderOut, PlaceOrder

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
    order = Order(order_id)
    order.place(body.customer_id, body.total_cents, closes_at)
    async with store(request).transaction() as tx:
        await order.save(tx)
        await close_order.schedule(tx, CloseOrder(order_id=order_id), key=order_id, at=closes_at)
    return json_response(order.out(), 201)


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
    found = await Order.find(store(request), request.match_info["order_id"])
    if found is None:
        raise NotFound("no such order")
    return json_response(found.out())


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
            "409": problem(
                "the order was paid already, or closed unpaid, or another payment came first"
            ),
        },
    },
    structs=(OrderOut,),
)
async def pay_order(request: web.Request) -> web.Response:
    order_id = request.match_info["order_id"]
    async with store(request).transaction() as tx:
        order = await Order.find(tx, order_id)
        if order is None:
            raise NotFound("no such order")
        order.pay()  # Conflict: paid already, or closed
        await order.save(tx)  # VersionConflict: another payment saved first
        await close_order.cancel(tx, order_id)
    return json_response(order.out())


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
