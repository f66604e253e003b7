"""An app's routes are served and documented like sluice's, and the admin routes serve its
groups and event types with no change: pause and resume, dead letters, event search."""

from __future__ import annotations

from collections.abc import Callable

from sluice.app.assembly import create_app
from sluice.config import Config
from tests.api.helpers import AiohttpClient, problem
from tests.app_helpers import AppDir

TOKEN = "app-routes-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}

GREETER = """
from typing import ClassVar

import msgspec
from aiohttp import web
from sluice.app import (
    App, Event, HandlerContext, NotFound, json_response, ok, problem, store, request_body,
    read_json, BAD_BODY,
)

app = App("greeter")
app.aggregate("greetings", key="name")
app.migration(1, "greetings", "CREATE TABLE greetings (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")


@app.event
class Greeted(Event, frozen=True, kw_only=True, tag=True):
    aggregate: ClassVar[str] = "greetings"
    name: str


class Greeting(msgspec.Struct):
    name: str


cheers = app.group("cheers")


@cheers.on(Greeted)
async def cheer(event: Greeted, ctx: HandlerContext) -> None:
    pass


@app.route("POST", "/v1/greetings", doc={
    "operationId": "greet", "summary": "Greet someone", "requestBody": request_body(Greeting),
    "responses": {"201": ok(Greeting, "greeted"), **BAD_BODY},
}, structs=(Greeting,))
async def greet(request: web.Request) -> web.Response:
    body = await read_json(request, Greeting)
    async with store(request).transaction() as tx:
        await tx.execute(
            "INSERT INTO greetings VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET n = greetings.n + 1",
            (body.name,),
        )
        await tx.append(Greeted(name=body.name))
    return json_response(body, 201)


@app.route("GET", "/v1/greetings/{name}", doc={
    "operationId": "greeting", "summary": "How often someone was greeted",
    "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
    "responses": {"200": ok(Greeting, "greeted"), "404": problem("never greeted")},
}, structs=(Greeting,))
async def greeting(request: web.Request) -> web.Response:
    row = await store(request).fetchone(
        "SELECT n FROM greetings WHERE name = ?", (request.match_info["name"],)
    )
    if row is None:
        raise NotFound("never greeted")
    return json_response({"name": request.match_info["name"], "times": row[0]})
"""


async def test_an_app_s_routes_commit_its_state_and_events_and_are_documented(
    app_dir: AppDir, aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    app_dir.module("greeter_app", GREETER)
    client = await aiohttp_client(
        create_app(make_config(apps="default,greeter_app", admin_token=TOKEN))
    )
    for _ in range(2):
        created = await client.post("/v1/greetings", json={"name": "ada"})
        assert created.status == 201, await created.text()
    answer = await client.get("/v1/greetings/ada")
    assert (answer.status, await answer.json()) == (200, {"name": "ada", "times": 2})
    await problem(await client.get("/v1/greetings/bob"), 404)
    await problem(await client.post("/v1/greetings", json={"name": 7}), 400)
    # Its events carry the request's trace id, with no code of the app's saying so.
    created = await client.post(
        "/v1/greetings",
        json={"name": "cy"},
        headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    found = await client.get("/v1/admin/events?type=Greeted", headers=ADMIN)
    assert found.status == 200, await found.text()
    items = (await found.json())["items"]
    assert len(items) == 3
    assert items[0]["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    document = await (await client.get("/openapi.json")).json()
    assert document["paths"]["/v1/greetings"]["post"]["operationId"] == "greet"
    assert "Greeting" in document["components"]["schemas"]
    # The short links' catch-all still comes after the app's routes.
    assert (await client.get("/v1/greetings/ada")).status == 200


async def test_the_admin_routes_serve_an_app_s_groups(
    app_dir: AppDir, aiohttp_client: AiohttpClient, make_config: Callable[..., Config]
) -> None:
    app_dir.module("greeter_app", GREETER)
    client = await aiohttp_client(
        create_app(make_config(apps="default,greeter_app", admin_token=TOKEN))
    )
    paused = await client.post("/v1/admin/groups/cheers/pause", headers=ADMIN)
    assert paused.status == 204
    history = await client.get("/v1/admin/history?group=cheers&minutes=5", headers=ADMIN)
    assert history.status == 200, await history.text()
    letters = await client.get("/v1/admin/dead-letters?group=cheers", headers=ADMIN)
    assert (letters.status, await letters.json()) == (200, [])
    assert (await client.post("/v1/admin/groups/cheers/resume", headers=ADMIN)).status == 204
    await problem(await client.post("/v1/admin/groups/nope/pause", headers=ADMIN), 404)
    metrics = await client.get("/metrics", headers=ADMIN)
    assert 'sluice_group_paused{group="cheers"} 0.0' in await metrics.text()
