"""Uploads larger than the JSON limit: the caller's credentials and limits are checked
before any of the body is read, and imports are capped per user.

Issue 43, findings 1 and 5: ``POST /v1/links/imports`` read up to 10 MiB from anyone
before it looked at the token (30 such sockets took the API from 210 to 509 MB), and
one user could queue any number of imports. Now a refused upload is answered 401,
403 or 429 after its head, and its connection closed with the body unread; at most
``SLUICE_IMPORTS_PER_USER`` (3) imports per user are queued or running at once. See
docs/guides/security.md, "Uploads".
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sluice.app.assembly import assemble
from sluice.builtin.links.imports.jobs import IMPORT
from sluice.builtin.links.settings import LinksSettings
from sluice.config import Config, load_config
from sluice.errors import ConfigError
from sluice.store import Store
from tests.api.helpers import Client, problem
from tests.api.raw_http import Connect, Wire
from tests.link_helpers import OTHER, OTHER_TOKEN, OWNER_TOKEN, add_user, bearer

MIB = 1024 * 1024
CSV = {"Content-Type": "text/csv"}


def small_csv(n: int) -> bytes:
    return f"url\nhttps://example.org/file-{n}\n".encode()


async def upload(client: Client, body: bytes, token: str = OWNER_TOKEN) -> Any:
    return await client.post("/v1/links/imports", data=body, headers={**CSV, **bearer(token)})


async def import_jobs(store: Store, owner: str | None = None) -> int:
    sql, params = "SELECT COUNT(*) FROM jobs WHERE kind = ?", [IMPORT]
    if owner is not None:
        sql, params = sql + " AND owner_id = ?", [IMPORT, owner]
    row = await store.fetchone(sql, params)
    assert row is not None
    return int(row[0])


async def start_large_upload(
    wire: Wire, path: str, *headers: str, length: int = 10 * MIB - 10
) -> None:
    """The head of a ``length``-byte CSV upload and its first KiB, and nothing more."""
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: sluice",
        "Content-Type: text/csv",
        f"Content-Length: {length}",
        *headers,
    ]
    wire.send(("\r\n".join(lines) + "\r\n\r\n").encode(), b"url\n" + b"x" * 1020)
    await wire.writer.drain()


async def refused_unread(wire: Wire, status: int) -> dict[str, str]:
    """The answer, sent while the body is still owed, with the connection closed after
    it (nothing of the body drained): the headers of that answer."""
    line, headers, body = await wire.response()
    assert line.startswith(f"HTTP/1.1 {status} "), (line, body)
    assert headers["Content-Type"].startswith("application/problem+json")
    assert headers["Connection"] == "close"
    with contextlib.suppress(ConnectionResetError):  # closed with the body unread
        assert await wire.closed() == b""  # by the server: the ~10 MiB were never sent
    return headers


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token-of-anyone"])
async def test_an_upload_without_a_valid_token_is_401_with_its_body_unread(
    client: Client, connect: Connect, authorization: str | None
) -> None:
    wire = await connect(client)
    extra = () if authorization is None else (f"Authorization: {authorization}",)
    await start_large_upload(wire, "/v1/links/imports", *extra)
    headers = await refused_unread(wire, 401)
    assert headers["WWW-Authenticate"].startswith("Bearer")


async def test_every_route_taking_a_large_body_refuses_a_stranger_before_reading_it(
    client: Client, connect: Connect
) -> None:
    """Whatever route declares a body over the JSON limit: not one byte past the head
    is needed to refuse an upload without credentials."""
    from sluice.http.app_keys import LARGE_BODIES

    assert client.app is not None
    routes = client.app[LARGE_BODIES]
    assert ("POST", "/v1/links/imports") in routes
    for method, path in routes:
        wire = await connect(client)
        await start_large_upload(wire, path.replace("{", "x").replace("}", "x"))
        await refused_unread(wire, 401)
        assert method == "POST"


async def test_a_user_at_the_import_cap_gets_429_with_the_body_unread(
    client: Client, store: Store, connect: Connect, config: Config
) -> None:
    await add_user(store)
    for n in range(3):
        assert (await upload(client, small_csv(n))).status == 202
    wire = await connect(client)
    await start_large_upload(wire, "/v1/links/imports", f"Authorization: Bearer {OWNER_TOKEN}")
    headers = await refused_unread(wire, 429)
    assert int(headers["Retry-After"]) >= 1
    assert await import_jobs(store) == 3


async def test_a_fourth_import_at_once_is_429_and_room_comes_back_when_one_ends(
    client: Client, store: Store
) -> None:
    await add_user(store)
    await add_user(store, OTHER, OTHER_TOKEN)
    jobs = []
    for n in range(3):
        response = await upload(client, small_csv(n))
        assert response.status == 202, await response.text()
        jobs.append((await response.json())["job_id"])
    fourth = await upload(client, small_csv(3))
    body = await problem(fourth, 429)
    assert int(fourth.headers["Retry-After"]) >= 1
    assert "3 imports queued or running" in body["detail"]
    assert "SLUICE_IMPORTS_PER_USER" in body["detail"]
    theirs = await upload(client, small_csv(3), OTHER_TOKEN)  # another user's own places
    assert theirs.status == 202, await theirs.text()
    # Cancelling one (or its end) makes room again.
    cancelled = await client.delete(f"/v1/jobs/{jobs[0]}", headers=bearer())
    assert cancelled.status == 202, await cancelled.text()
    assert (await upload(client, small_csv(3))).status == 202
    await problem(await upload(client, small_csv(4)), 429)
    assert await import_jobs(store) == 5


async def test_uploads_at_the_same_time_cannot_pass_the_cap_together(
    client: Client, store: Store
) -> None:
    await add_user(store)
    responses = await asyncio.gather(*(upload(client, small_csv(n)) for n in range(6)))
    assert sorted(response.status for response in responses) == [202] * 3 + [429] * 3
    assert await import_jobs(store) == 3


def test_the_cap_is_set_by_sluice_imports_per_user_and_is_at_least_one() -> None:
    assert LinksSettings.of(load_config({})).imports_per_user == 3
    assert LinksSettings.of(load_config({"SLUICE_IMPORTS_PER_USER": "1"})).imports_per_user == 1
    with pytest.raises(ConfigError, match=r"SLUICE_IMPORTS_PER_USER .* app 'links'"):
        assemble(load_config({"SLUICE_IMPORTS_PER_USER": "0"}))
