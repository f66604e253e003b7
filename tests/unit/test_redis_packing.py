"""Commands packed by hiredis in one call are the bytes redis-py would have sent."""

from __future__ import annotations

import math

import pytest
from redis._parsers.encoders import Encoder
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from sluice.config import load_config
from sluice.process.resources import redis_client
from sluice.redis_client.packing import PackedCommands, PackedConnection, packed

ARGUMENTS = [
    ("XACK", "sluice:articles", "article-views", "1733300000000-0", "1733300000000-1"),
    ("XADD", "s", "*", "data", b"\x00\xff binary", "text", "caf\u00e9 \U0001f600"),
    ("SET", "k", 0, -1, 2**70, 1.5, 0.1 + 0.2, 1e20, 5e-324, math.inf, -math.inf),
    ("XINFO GROUPS", "sluice:articles"),  # redis-py splits the name
    ("SET", "k", bytearray(b"array"), memoryview(b"view")),  # hiredis refuses: redis-py's
]


@pytest.mark.parametrize("args", ARGUMENTS, ids=lambda args: str(args[0]))
def test_a_command_is_packed_into_the_bytes_redis_py_sends(args: tuple[object, ...]) -> None:
    ours, theirs = PackedConnection(), Connection()
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))


def test_a_client_with_another_encoding_packs_as_redis_py_does() -> None:
    args = ("SET", "k", "caf\u00e9")
    ours, theirs = PackedConnection(encoding="latin-1"), Connection(encoding="latin-1")
    assert b"".join(ours.pack_command(*args)) == b"".join(theirs.pack_command(*args))
    assert b"caf\xe9" in b"".join(ours.pack_command(*args))


@pytest.mark.parametrize("bad", [True, None, object()])
def test_an_argument_redis_py_refuses_is_still_refused(bad: object) -> None:
    with pytest.raises(DataError):
        PackedConnection().pack_command("SET", "k", bad)


def test_a_pipeline_packs_every_command_in_order() -> None:
    commands = [("XACK", "s", "g", f"1-{i}") for i in range(3)] + [("HSET", "h", "c", 17)]
    ours, theirs = PackedConnection(), Connection()
    assert b"".join(ours.pack_commands(commands)) == b"".join(theirs.pack_commands(commands))


@pytest.mark.parametrize("base", [Connection, SSLConnection, UnixDomainSocketConnection])
def test_every_kind_of_connection_keeps_its_transport(base: type[Connection]) -> None:
    made = packed(base)
    assert issubclass(made, base) and issubclass(made, PackedCommands)
    assert packed(base) is made and packed(made) is made


def test_plain_arguments_skip_the_per_argument_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Encoder, value: object) -> bytes:
        raise AssertionError(f"encoded {value!r} one by one")

    monkeypatch.setattr(Encoder, "encode", refuse)
    connection = PackedConnection()
    ids = [f"1733300000000-{i}" for i in range(500)]
    packed_ack = b"".join(connection.pack_command("XACK", "s", "g", *ids))
    assert packed_ack.startswith(b"*503\r\n$4\r\nXACK\r\n")
    assert packed_ack.count(b"\r\n") == 1 + 2 * 503  # the header, then 503 arguments


def test_the_service_clients_pack_this_way() -> None:
    for url in ("redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0", "unix:///tmp/none.sock"):
        client = redis_client(load_config({}, redis_url=url))
        assert issubclass(client.connection_pool.connection_class, PackedCommands), url
