"""The groups (OpenAPI tags) of the built-in apps' operations, by the resource a path
names after /v1/: the groups release 1 drew in /docs, kept across the apps."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sluice.app import Route

_USER_RESOURCES = frozenset({"tokens", "me", "verify", "unsubscribe"})


def _tag(path: str) -> str:
    parts = path.split("/")
    if parts[1] != "v1":
        return "links" if path == "/{code}" else "service"
    return "users" if parts[2] in _USER_RESOURCES else parts[2]


def tagged(routes: Sequence[Route]) -> tuple[Route, ...]:
    """``routes`` each in the group its path names, unless its operation names its own
    (``App.add_routes`` would put them in a group named after the app)."""
    return tuple(
        route
        if "tags" in route.doc
        else dataclasses.replace(route, doc={"tags": [_tag(route.path)], **route.doc})
        for route in routes
    )
