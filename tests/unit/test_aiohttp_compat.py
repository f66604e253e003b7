"""Which aiohttp the connections know (``sluice.http.aiohttp_compat``): the one the suite
runs on, the range pyproject.toml allows, and what an unknown one turns off."""

from __future__ import annotations

import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from packaging.requirements import Requirement

from sluice.http import aiohttp_compat
from sluice.http.aiohttp_compat import WIRE_VERSIONS, AiohttpFit

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


@pytest.fixture
async def server() -> AsyncIterator[web.Server]:
    async def answer(request: web.BaseRequest) -> web.Response:
        return web.Response()

    server = web.Server(answer)
    yield server
    await server.shutdown()


def checked(server: web.Server) -> tuple[AiohttpFit, list[dict[str, Any]]]:
    """What ``check`` found, and the warnings it logged."""
    with structlog.testing.capture_logs() as logs:
        fit = aiohttp_compat.check(server)
    return fit, [entry for entry in logs if entry["log_level"] == "warning"]


def test_the_aiohttp_the_wire_is_tested_on_is_what_pyproject_allows() -> None:
    """Raising pyproject's bound on aiohttp without the wire path's range (and running its
    tests on the new minor) would turn the wire off, with a warning, for every install."""
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (aiohttp_requirement,) = [
        Requirement(line) for line in dependencies if Requirement(line).name == "aiohttp"
    ]
    allowed = aiohttp_requirement.specifier
    (major, minor, patch), last = WIRE_VERSIONS
    assert allowed.contains(f"{major}.{minor}.{patch}")
    assert not allowed.contains(
        f"{major}.{minor}.{patch - 1}" if patch else f"{major}.{minor - 1}.99"
    )
    assert allowed.contains(f"{major}.{minor}.99")
    assert not allowed.contains(".".join(map(str, last)))
    assert not allowed.contains(f"{major + 1}.0.0")


async def test_the_aiohttp_the_suite_runs_on_is_known(server: web.Server) -> None:
    """Else the wire tests would pass on the request path and test nothing of the wire."""
    fit, warnings = checked(server)
    assert fit == AiohttpFit(aiohttp.__version__, (), wire=True, head_deadline=True)
    assert warnings == []


@pytest.mark.parametrize(
    ("version", "known"),
    [
        ("3.14.4", True),
        ("3.14.5", True),
        ("3.14.10.dev0", True),
        ("3.14.3", False),
        ("3.14.0", False),
        ("3.13.3", False),
        ("3.9.5", False),
        ("3.15.0", False),
        ("3.15.0a1", False),
        ("4.0.0", False),
        ("", False),
    ],
)
async def test_a_version_outside_the_tested_minors_turns_the_wire_off(
    server: web.Server, monkeypatch: pytest.MonkeyPatch, version: str, known: bool
) -> None:
    monkeypatch.setattr(aiohttp, "__version__", version)
    fit, warnings = checked(server)
    assert (fit.wire, fit.head_deadline) == (known, True)
    assert len(warnings) == (0 if known else 1)
    if not known:
        (warning,) = warnings
        assert warning["aiohttp"] == version
        assert warning["missing"] == ["aiohttp>=3.14.4,<3.15.0"]


@pytest.mark.parametrize(
    ("gone", "head_deadline"),
    [
        ("_waiter", False),
        ("_request_count", False),
        ("_next_keepalive_close_time", True),
        ("_messages", True),
        ("_max_msg_queue_size", True),  # the parser's message_consumed without it (>= 3.14.1)
    ],
)
async def test_a_request_handler_without_what_the_connections_read_turns_them_off(
    server: web.Server, monkeypatch: pytest.MonkeyPatch, gone: str, head_deadline: bool
) -> None:
    if not hasattr(web.RequestHandler, gone):
        pytest.skip(f"this aiohttp ({aiohttp.__version__}) has no {gone}")
    made = web.RequestHandler.__init__

    def without(self: web.RequestHandler, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        delattr(self, gone)  # as if this aiohttp had renamed it

    monkeypatch.setattr(web.RequestHandler, "__init__", without)
    fit, warnings = checked(server)
    assert (fit.wire, fit.head_deadline) == (False, head_deadline)
    assert fit.missing == (gone,)
    (warning,) = warnings
    assert (warning["aiohttp"], warning["missing"]) == (aiohttp.__version__, [gone])
    assert ("no head deadline" in warning["event"]) is not head_deadline


async def test_a_parser_whose_heads_are_reshaped_turns_the_wire_off(
    server: web.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = web.RequestHandler.__init__

    class Reshaped:
        """A parser whose ``feed_data`` gives the messages alone."""

        def __init__(self, parser: Any) -> None:
            self._parser = parser

        def feed_data(self, data: bytes) -> Any:
            return self._parser.feed_data(data)[0]

        def __getattr__(self, name: str) -> Any:
            return getattr(self._parser, name)

    def reshaped(self: web.RequestHandler, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self._parser = Reshaped(self._parser)

    monkeypatch.setattr(web.RequestHandler, "__init__", reshaped)
    fit, warnings = checked(server)
    assert (fit.wire, fit.head_deadline) == (False, True)
    (missing,) = fit.missing
    assert missing.startswith("a parsed head as the wire path reads it")
    assert len(warnings) == 1
