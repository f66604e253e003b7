"""Whether the API's address can be listened on, asked before a command starts anything.

``sluice up`` checks it before it generates and prints the admin token and before it
starts the embedded Redis: on a port in use it ends at once with one line, instead of
printing the one-time token and then failing to bind. The probe binds as the API binds
(``SO_REUSEADDR``, so connections of an earlier run still closing do not count as a
user) but without ``SO_REUSEPORT``: a port any socket listens on is in use, a sluice API
of several processes (``sluice api --processes``, which binds with ``SO_REUSEPORT``)
included, since a second deployment sharing its port would get half its connections.
The probe is closed before the API binds; a program that takes the port in between makes
the API's own bind fail, as it did before the check.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from typing import Any

from sluice.errors import ConfigError

# How far above a port in use a free one is looked for, to suggest it.
_SUGGESTION_RANGE = 100


def _addresses(host: str, port: int) -> list[tuple[socket.AddressFamily, Any]]:
    """Each address the API would listen on for ``host`` (all those it resolves to, as
    ``loop.create_server`` binds them)."""
    found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return list(dict.fromkeys((family, address) for family, _, _, _, address in found))


def _bindable(host: str, port: int) -> OSError | None:
    """None when every address of ``host`` can be bound at ``port``; else the error."""
    try:
        addresses = _addresses(host, port)
    except socket.gaierror as exc:
        return exc
    for family, address in addresses:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio's create_server: v6 only
                with contextlib.suppress(OSError):
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return exc
    return None


def check_listenable(host: str, port: int) -> None:
    """Raise ``ConfigError`` with one line saying why ``host:port`` cannot be listened on
    (and, for a port in use, a free one to set ``SLUICE_PORT`` to). Port 0 (any free
    one) always can."""
    if port == 0:
        return
    error = _bindable(host, port)
    if error is None:
        return
    if error.errno == errno.EADDRINUSE:
        free = next(
            (
                p
                for p in range(port + 1, min(port + _SUGGESTION_RANGE, 65535) + 1)
                if _bindable(host, p) is None
            ),
            None,
        )
        such_as = f", such as SLUICE_PORT={free}" if free is not None else ""
        raise ConfigError(
            f"port {port} on {host} is in use (by another program, or another sluice):"
            f" set SLUICE_PORT to a free one{such_as}"
        )
    raise ConfigError(
        f"cannot listen on {host} port {port} (SLUICE_HOST, SLUICE_PORT): {error.strerror or error}"
    )
