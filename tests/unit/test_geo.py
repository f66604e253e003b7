"""The country of a client address: the bundled registry data, and whose address it is."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from sluice.builtin.links.geo import country_of
from sluice.config.networks import trusted_networks
from sluice.http.client_address import client_ip

PROXIES = trusted_networks("10.0.0.0/8")

# Long-standing registry assignments to national networks, not anycast services:
# RIPE NCC's own network (Amsterdam), Deutsche Telekom, the German research network
# DFN, and NIC.br (the Brazilian registry).
KNOWN = [
    ("193.0.6.139", "NL"),
    ("80.128.0.1", "DE"),
    ("200.160.0.1", "BR"),
    ("2001:67c:2e8:22::c100:68b", "NL"),
    ("2001:638::1", "DE"),
    ("2001:12ff::1", "BR"),
]


@pytest.mark.parametrize(("address", "country"), KNOWN)
def test_a_public_address_resolves_to_its_country(address: str, country: str) -> None:
    assert country_of(address) == country
    assert country_of(ipaddress.ip_address(address)) == country


def test_an_ipv4_mapped_ipv6_address_is_its_ipv4_address() -> None:
    assert country_of("::ffff:193.0.6.139") == "NL"


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "127.0.0.1",
        "100.64.0.1",
        "169.254.1.1",
        "0.0.0.0",
        "224.0.0.1",
        "192.0.2.1",
        "::1",
        "::",
        "fe80::1",
        "fd00::1",
        "2001:db8::1",
        "::ffff:10.1.2.3",
        "not an address",
        "",
        None,
    ],
)
def test_private_loopback_reserved_and_unreadable_addresses_have_no_country(
    address: str | None,
) -> None:
    assert country_of(address) is None


def _request(peer: str, xff: str | None = None) -> web.Request:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 4711) if name == "peername" else default
    )
    headers = {} if xff is None else {"X-Forwarded-For": xff}
    return make_mocked_request("GET", "/abc123", headers=headers, transport=transport)


def test_the_country_is_the_forwarded_clients_behind_a_trusted_proxy() -> None:
    request = _request("10.0.0.7", xff="80.128.0.1, 10.0.0.9")
    assert country_of(client_ip(request, PROXIES)) == "DE"


def test_a_forwarded_header_from_an_untrusted_peer_is_not_believed() -> None:
    request = _request("193.0.6.139", xff="80.128.0.1")
    assert country_of(client_ip(request, PROXIES)) == "NL"


def test_an_ipv6_client_keeps_its_whole_address_for_the_lookup() -> None:
    request = _request("10.0.0.7", xff="2001:638::1")
    assert client_ip(request, PROXIES) == ipaddress.ip_address("2001:638::1")
    assert country_of(client_ip(request, PROXIES)) == "DE"


def test_the_table_is_loaded_on_the_first_lookup_not_at_import() -> None:
    probe = (
        "import sys; import sluice.builtin.links.geo as geo, sluice.builtin.links.targeting;"
        "assert 'iptocc' not in sys.modules; geo.country_of('193.0.6.139');"
        "assert 'iptocc' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
