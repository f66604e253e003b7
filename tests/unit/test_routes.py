"""The router and the OpenAPI document come from the same declarations (``openapi.routes_of``:
sluice's routes and the default apps')."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from sluice.app.assembly import create_app, default_apps
from sluice.config import load_config
from sluice.http.openapi import build_document, routes_of
from sluice.http.route_docs import SCHEMA_REF
from sluice.http.schemas import Problem


def test_the_router_and_the_document_hold_the_declared_routes_and_nothing_else(
    tmp_path: Path,
) -> None:
    app = create_app(load_config({"SLUICE_DATA_DIR": str(tmp_path)}))
    routed = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }
    document = build_document("http://sluice.test", default_apps())
    documented = {
        (method.upper(), path) for path, item in document["paths"].items() for method in item
    }
    routes = routes_of(default_apps())
    declared = {(route.method, route.path) for route in routes}

    assert len(declared) == len(routes)  # no route declared twice
    assert documented == declared
    # aiohttp adds a HEAD to each GET; only a path that declares its own HEAD has no other.
    implicit_heads = {
        ("HEAD", path)
        for method, path in declared
        if method == "GET" and ("HEAD", path) not in declared
    }
    assert routed == declared | implicit_heads


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        own = {node["$ref"]} if "$ref" in node else set()
        return own.union(*(_refs(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(value) for value in node))
    return set()


def test_each_route_declares_the_structs_its_operation_refers_to() -> None:
    """So a route keeps its schemas wherever it moves, not thanks to a neighbour's."""
    for route in routes_of(default_apps()):
        structs = (Problem, *route.structs)
        _, schemas = msgspec.json.schema_components(structs, ref_template=SCHEMA_REF)
        named = {ref.removeprefix(SCHEMA_REF.format(name="")) for ref in _refs(route.doc)}
        assert named <= set(schemas), (route.method, route.path)
