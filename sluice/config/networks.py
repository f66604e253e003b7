"""Addresses in settings: the trusted proxies' networks and a Redis cluster's seed nodes."""

from __future__ import annotations

import ipaddress

from sluice.errors import ConfigError

# An IPv4 or IPv6 network, as ``trusted_networks`` parses them.
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(text: str) -> tuple[Network, ...]:
    """``SLUICE_TRUSTED_PROXIES``: comma-separated addresses or CIDRs (``10.0.0.0/8``)."""
    networks: list[Network] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(
                f"SLUICE_TRUSTED_PROXIES: {part!r} is not an IP address or CIDR"
            ) from None
    return tuple(networks)


def cluster_nodes(text: str) -> list[tuple[str, int]]:
    """``SLUICE_REDIS_CLUSTER_NODES``: comma-separated ``host:port`` seed nodes."""
    nodes: list[tuple[str, int]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"SLUICE_REDIS_CLUSTER_NODES: {part!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    return nodes
