"""The OpenAPI document covers every route the app registers."""

from __future__ import annotations

from typing import Any

from tests.api.helpers import Client


async def fetch_document(client: Client) -> dict[str, Any]:
    response = await client.get("/openapi.json")
    assert response.status == 200
    document: dict[str, Any] = await response.json()
    return document


async def test_every_route_is_documented(client: Client) -> None:
    document = await fetch_document(client)
    assert document["openapi"] == "3.1.0"
    assert client.app is not None
    # aiohttp answers HEAD on every GET route; only the redirect's HEAD is a route of its
    # own in the spec (it records no visit), so it is the only HEAD documented.
    registered = {
        (route.method.lower(), route.resource.canonical)
        for route in client.app.router.routes()
        if route.resource is not None
        and (route.method != "HEAD" or route.resource.canonical == "/{code}")
    }
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    assert registered
    assert registered <= documented
    assert documented <= registered  # nothing documented that does not exist


# The password form's answers to a person's browser: the form again, saying what failed.
HTML_ERRORS = {("unlockLink", "401"), ("unlockLink", "429")}


async def test_references_resolve_and_errors_are_problems(client: Client) -> None:
    document = await fetch_document(client)
    schemas = document["components"]["schemas"]

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            own = [node["$ref"]] if "$ref" in node else []
            return own + [r for value in node.values() for r in refs(value)]
        if isinstance(node, list):
            return [r for value in node for r in refs(value)]
        return []

    for ref in refs(document):
        assert ref.removeprefix("#/components/schemas/") in schemas
    for item in document["paths"].values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                if int(status) >= 400 and (operation["operationId"], status) not in HTML_ERRORS:
                    assert "application/problem+json" in response["content"]


async def test_view_post_documents_its_body_and_errors(client: Client) -> None:
    document = await fetch_document(client)
    operation = document["paths"]["/v1/articles/{article_id}/views"]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ViewBody"
    }
    assert {"202", "400", "413", "415", "422", "503"} <= set(operation["responses"])
    viewer = document["components"]["schemas"]["ViewBody"]["properties"]["viewer"]
    assert {"type": "string", "minLength": 1, "maxLength": 256} in viewer["anyOf"]


async def test_every_operation_documents_its_503_and_its_own_description_stays(
    client: Client,
) -> None:
    # The middleware answers 503 on any route whose database or Redis fails.
    document = await fetch_document(client)
    operations = [op for item in document["paths"].values() for op in item.values()]
    assert all("503" in op["responses"] for op in operations)
    views = document["paths"]["/v1/articles/{article_id}/views"]["post"]["responses"]["503"]
    assert views["description"] == "the database is unavailable; nothing was counted"
    users = document["paths"]["/v1/users"]["post"]["responses"]["503"]
    assert "database or Redis is unavailable" in users["description"]


async def test_the_abuse_limits_answers_are_documented(client: Client) -> None:
    """docs/guides/security.md: 429 on logins, registrations and every admin route (per client
    address), 503 when password hashing is at its bound, 408 where a body is read."""
    document = await fetch_document(client)
    operations = {
        (method, path): op
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    admin = [op for op in operations.values() if op.get("security") == [{"admin": []}]]
    assert len(admin) >= 8
    for op in [*admin, operations[("post", "/v1/tokens")], operations[("post", "/v1/users")]]:
        assert "Retry-After" in op["responses"]["429"]["headers"]
    for key in (("post", "/v1/tokens"), ("post", "/v1/users")):
        assert "passwords" in operations[key]["responses"]["503"]["description"]
    for op in operations.values():
        if "requestBody" in op:
            assert "408" in op["responses"], op["operationId"]


async def test_every_operation_is_in_a_described_group(client: Client) -> None:
    """/docs draws one section per tag: an operation outside the described ones would sit
    in a group nobody explained."""
    document = await fetch_document(client)
    described = {tag["name"] for tag in document["tags"] if tag["description"]}
    operations = [op for item in document["paths"].values() for op in item.values()]
    used = {tag for op in operations for tag in op["tags"]}
    assert used == described
    assert document["paths"]["/v1/links/{code}"]["get"]["tags"] == ["links"]
    assert document["paths"]["/v1/admin/jobs"]["get"]["tags"] == ["admin"]
