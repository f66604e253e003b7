"""Commands packed by hiredis in one call.

redis-py with hiredis packs a command in two steps: a Python call per argument to its
``Encoder`` (``str`` to UTF-8 ``bytes``, numbers to their ``repr``), then one
``hiredis.pack_command`` of the tuple. hiredis takes ``str``, ``bytes``, ``int`` and
``float`` itself (exactly those types: subclasses are refused), and writes them the same
way (UTF-8, strict, redis-py's default encoding; the ``repr`` of a float, checked on
200,000 random doubles), so the first step only costs: an ``XACK`` of a
batch's 500 entry ids paid 500 Python calls, 8 % of an ``article-views`` consumer's
instructions (callgrind; bench/README.md). ``PackedCommands`` hands the tuple straight
to hiredis and leaves to redis-py what hiredis refuses (``bool``, ``None``,
``memoryview``, ``bytearray``: redis-py raises ``DataError`` or copies them) and
command names with a space (``XINFO GROUPS``), which redis-py splits.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.asyncio.connection import AbstractConnection, Connection

_UTF8_STRICT = {("utf-8", "strict"), ("utf8", "strict"), ("UTF-8", "strict")}


class PackedCommands(AbstractConnection):
    """A connection whose commands hiredis packs in one call (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # hiredis writes str as UTF-8 and fails on what UTF-8 cannot encode: redis-py's
        # defaults, which sluice keeps; a client set otherwise is left to redis-py.
        encoder = self.encoder
        self._by_hiredis = (encoder.encoding, encoder.encoding_errors) in _UTF8_STRICT

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        if self._by_hiredis and isinstance(name, str) and " " not in name:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # an argument hiredis does not take: redis-py's way
                pass
        return super().pack_command(*args)


class PackedConnection(PackedCommands, Connection):
    """A TCP connection with ``PackedCommands``."""


_PACKED: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def packed(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` (TCP, TLS or a Unix socket, as the URL says) with
    ``PackedCommands``."""
    if issubclass(connection_class, PackedCommands):
        return connection_class
    if connection_class not in _PACKED:
        name = f"Packed{connection_class.__name__}"
        _PACKED[connection_class] = type(name, (PackedCommands, connection_class), {})
    return _PACKED[connection_class]
