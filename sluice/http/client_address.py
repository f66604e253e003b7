"""Who is calling, by network address: the peer, or what a trusted proxy says it is.

Forwarded headers are believed only when the peer is in ``SLUICE_TRUSTED_PROXIES``
(anyone can send them otherwise). Then the hops are read from the right, the
side each proxy appends to, skipping trusted ones: the first address that is not
a trusted proxy is the client. What a client wrote into the header itself sits
to the left of that and is never reached. ``X-Forwarded-For`` is read when
present, else ``Forwarded`` (RFC 7239, its ``for=`` parameters): a proxy that
sets only ``Forwarded`` must drop an ``X-Forwarded-For`` sent by the client.

An IPv6 client is its /64: one host commonly holds a whole /64, so limiting the
single address would limit nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Protocol

from multidict import CIMultiDictProxy, istr

from sluice.config.networks import Network

_XFF = istr("X-Forwarded-For")
_FORWARDED = istr("Forwarded")
_FORWARDED_FOR = re.compile(r'(?:^|[;,\s])for\s*=\s*("[^"]*"|[^;,\s]*)', re.IGNORECASE)
_PORT = re.compile(r"^\[(?P<v6>[^\]]+)\](?::\d+)?$|^(?P<v4>[\d.]+):\d+$")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Caller(Protocol):
    """Who asks, as this module reads it: a request (``web.BaseRequest``), or a request
    head parsed before aiohttp made a request of it (``sluice.http.redirect_wire``)."""

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The request's headers, by case-insensitive name."""

    @property
    def remote(self) -> str | None:
        """The peer's address as the transport gives it; None when not over IP."""


def _parse(raw: str) -> Address | None:
    text = raw.strip().strip('"')
    if match := _PORT.match(text):
        text = match["v6"] or match["v4"]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None  # "unknown", an obfuscated "_hidden" node, garbage
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _hops(request: Caller) -> list[str]:
    """The addresses the forwarded headers name, client side first."""
    headers = request.headers
    if _XFF in headers:
        return [hop for value in headers.getall(_XFF) for hop in value.split(",")]
    return [
        m[1] for value in headers.getall(_FORWARDED, ()) for m in _FORWARDED_FOR.finditer(value)
    ]


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def client_ip(request: Caller, trusted: Sequence[Network]) -> Address | None:
    """The client's own address (IPv4-mapped IPv6 as IPv4); None when not over IP."""
    peer = _parse(request.remote or "")
    if peer is None:  # not over IP (a unix socket, a test transport)
        return None
    client = peer
    if trusted and _trusted(peer, trusted):
        for hop in reversed(_hops(request)):
            address = _parse(hop)
            if address is None:
                break  # a hop we cannot read: the proxy right of it is as far as we know
            client = address
            if not _trusted(address, trusted):
                break
    return client


def client_host(request: Caller, trusted: Sequence[Network]) -> str:
    """``client_ip`` as text ("" when not over IP). With no trusted proxy it is the peer
    as the transport gives it, unparsed: the redirect asks on every visit."""
    remote = request.remote or ""
    if not trusted:
        return remote
    client = client_ip(request, trusted)
    return remote if client is None else str(client)


def client_address(request: Caller, trusted: Sequence[Network]) -> str:
    """The client's address as a key for limits: an IPv4 address, or an IPv6 /64."""
    client = client_ip(request, trusted)
    if client is None:
        return request.remote or "unknown"
    if isinstance(client, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((client, 64), strict=False))
    return str(client)
