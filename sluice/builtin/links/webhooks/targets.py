"""Where a webhook may point: the link URL rules, and no private address (SSRF).

At creation a URL whose host is an address literal (in any spelling a resolver
takes: ``127.1``, ``2130706433``, ``[::ffff:10.0.0.1]``) or a ``localhost`` name is
refused when the address is not public. At delivery time ``PinnedResolver`` resolves
the host, refuses the target when any address it resolves to is not public (saying
so without the address: it goes to the worker's log, not to the owner), and hands the
connector exactly the addresses it checked: aiohttp connects to those and
resolves nothing again, so a DNS answer that changes between the check and the
connection (rebinding) cannot reach another address. aiohttp does not ask the
resolver about address literals, so ``check_literal`` runs before each call too.
``SLUICE_WEBHOOK_ALLOW_PRIVATE=1`` turns both checks off.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from sluice.app import SluiceError
from sluice.builtin.links.rules import Invalid, check_url

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(SluiceError):
    """The webhook's host is, or resolves to, an address that is not public. The message,
    which the owner reads in the webhook's deliveries, never names the address a name
    resolved to (an internal DNS answer); ``address`` keeps it for the operator's log."""

    permanent = True  # the consumer runtime dead-letters the entry at once

    def __init__(self, message: str, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


def forbidden(address: Address) -> bool:
    """Not a public unicast address: private, loopback, link-local, multicast, reserved,
    unspecified, shared (CGNAT) or documentation; IPv4-mapped IPv6 as its IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            address = mapped
    return (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def literal_address(host: str) -> Address | None:
    """The address ``host`` spells, if it is an address literal (legacy IPv4 forms too)."""
    host = host.strip("[]").removesuffix(".")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    last = host.rpartition(".")[2].lower()
    if last.isdigit() or last.startswith("0x"):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return None
    return None


def _loopback_name(host: str) -> bool:
    host = host.lower().removesuffix(".")
    return host == "localhost" or host.endswith(".localhost")


def check_literal(host: str) -> None:
    """``TargetRefused`` when ``host`` is a loopback name or a non-public address literal."""
    address = literal_address(host)
    if _loopback_name(host) or (address is not None and forbidden(address)):
        raise TargetRefused(f"{host} is a private, loopback or otherwise non-public address")


def check_target(url: str, own: tuple[str, int], allow_private: bool) -> str:
    """The URL to store (``check_url``'s rules), or ``Invalid``."""
    url = check_url(url, own)
    if not allow_private:
        try:
            check_literal(urlsplit(url).hostname or "")
        except TargetRefused:
            raise Invalid(
                "must not point at a private, loopback or link-local address"
                " (SLUICE_WEBHOOK_ALLOW_PRIVATE=1 allows it)"
            ) from None
    return url


class PinnedResolver(AbstractResolver):
    """Resolves with ``inner`` and returns only checked, public addresses (see above)."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        for result in results:
            if forbidden(ipaddress.ip_address(result["host"].split("%", 1)[0])):
                raise TargetRefused(f"{host} resolves to a non-public address", result["host"])
        return results

    async def close(self) -> None:
        await self.inner.close()
