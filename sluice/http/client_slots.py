"""Connection slots per client address (docs/guides/security.md, "Connection slots").

A process takes ``SLUICE_MAX_CONNECTIONS`` connections in all; one client address holds
at most ``SLUICE_CONNECTIONS_PER_ADDRESS`` of them, so one client cannot take every slot
and leave everyone else the 503 of a full process. The address is the TCP peer's: a
forwarded header is not known before a request, and a slot is taken before any byte is
read. A proxy's connections are therefore all one address (docs/guides/behind-a-proxy.md).

IPv6 addresses count by /64: one host is routinely given a whole /64 (SLAAC, privacy
addresses), so counting single addresses would give it billions of shares. An
IPv4-mapped IPv6 address (``::ffff:192.0.2.1``, what a dual-stack listener sees of an
IPv4 client) counts as its IPv4 address, not as the one /64 of every IPv4 client.
"""

from __future__ import annotations

import ipaddress
import time

import msgspec
import structlog

from sluice.config import Config
from sluice.http.schemas import Problem
from sluice.telemetry.prometheus import CONNECTIONS_REFUSED

log = structlog.get_logger(__name__)

_REFUSED_LOG_EVERY = 10.0  # seconds: one warning per stretch of refusals, not one per connection


def slot_key(host: str) -> str:
    """The name ``host`` (a peer address as the socket gives it) counts its slots under:
    an IPv4 address itself, an IPv6 address's /64 (``2001:db8:1:2::/64``)."""
    if ":" not in host:
        return host  # IPv4, as the socket writes it
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if (mapped := address.ipv4_mapped) is not None:
        return str(mapped)
    return f"{ipaddress.IPv6Address(int(address) >> 64 << 64)}/64"


class AddressSlots:
    """How many connections each client address holds, up to ``per_address`` each."""

    __slots__ = ("_held", "per_address")

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address
        self._held: dict[str, int] = {}

    def take(self, key: str) -> bool:
        """One slot for ``key``; False (and nothing taken) when it holds its share."""
        held = self._held.get(key, 0)
        if held >= self.per_address:
            return False
        self._held[key] = held + 1
        return True

    def give_back(self, key: str) -> None:
        held = self._held[key] - 1
        if held:
            self._held[key] = held
        else:
            del self._held[key]  # a client gone leaves nothing behind

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    def __len__(self) -> int:
        """Addresses holding at least one slot."""
        return len(self._held)


def _refusal(detail: str) -> bytes:
    """A whole 503 answer, written to a connection that is closed right after it."""
    body = msgspec.json.encode(
        Problem(type="about:blank", title="Service Unavailable", status=503, detail=detail)
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/problem+json\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# By the cap a connection met: the process's, or its address's share of it.
_REFUSALS = {
    "process": (
        _refusal("this server holds as many connections as it takes; try again"),
        "connection cap reached: new connections answered 503 and closed",
    ),
    "address": (
        _refusal("this address holds as many connections as one address gets; try again"),
        "one address holds its share of connections: its new ones answered 503 and closed"
        " (behind a proxy, raise SLUICE_CONNECTIONS_PER_ADDRESS)",
    ),
}


class ConnectionLimits:
    """What every connection of one listening site shares: the deadlines, the count and
    the slots of each address. ``head_deadline``: False on an aiohttp without what the
    deadline reads of it."""

    def __init__(self, config: Config, *, head_deadline: bool = True) -> None:
        self.head_deadline = head_deadline
        self.header_timeout = config.header_timeout_seconds
        self.write_timeout = config.write_timeout_seconds
        self.max_connections = config.max_connections
        self.slots = AddressSlots(config.connections_per_address)
        self.open = 0
        self.refused = dict.fromkeys(_REFUSALS, 0)
        self._logged = dict.fromkeys(_REFUSALS, 0)
        self._last_log = dict.fromkeys(_REFUSALS, -_REFUSED_LOG_EVERY)

    def refusal(self, cap: str, address: str | None = None) -> bytes:
        """The answer to a connection refused at ``cap`` ("process" or "address"), counted;
        logged once per stretch of refusals (``address``: the last one refused)."""
        answer, message = _REFUSALS[cap]
        CONNECTIONS_REFUSED.labels(cap).inc()
        self.refused[cap] += 1
        now = time.monotonic()
        if now - self._last_log[cap] >= _REFUSED_LOG_EVERY:
            self._last_log[cap] = now
            fields = (
                {"max_connections": self.max_connections}
                if address is None
                else {"connections_per_address": self.slots.per_address, "address": address}
            )
            log.warning(message, refused=self.refused[cap] - self._logged[cap], **fields)
            self._logged[cap] = self.refused[cap]
        return answer
