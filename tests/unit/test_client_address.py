"""The client address limits count by: forwarded headers believed from trusted proxies only."""

from __future__ import annotations

from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from sluice.config.networks import trusted_networks
from sluice.errors import ConfigError
from sluice.http.client_address import client_address

PROXIES = trusted_networks("10.0.0.0/8, 2001:db8:ffff::/48")


def request(peer: str, **headers: str) -> web.Request:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 4711) if name == "peername" else default
    )
    names = {"xff": "X-Forwarded-For", "forwarded": "Forwarded"}
    sent = {names[key]: value for key, value in headers.items()}
    return make_mocked_request("GET", "/v1/tokens", headers=sent, transport=transport)


def test_without_trusted_proxies_the_peer_is_the_client_whatever_it_claims() -> None:
    sent = request("198.51.100.7", xff="203.0.113.1", forwarded="for=203.0.113.2")
    assert client_address(sent, ()) == "198.51.100.7"
    # A peer outside the trusted networks is not believed either.
    assert client_address(sent, PROXIES) == "198.51.100.7"


def test_a_trusted_proxy_names_the_client_and_what_the_client_wrote_is_skipped() -> None:
    assert client_address(request("10.1.2.3", xff="203.0.113.1"), PROXIES) == "203.0.113.1"
    # The client wrote the first entry itself; the proxy appended the address it saw.
    forged = request("10.1.2.3", xff="192.0.2.66, 203.0.113.1")
    assert client_address(forged, PROXIES) == "203.0.113.1"
    # Proxies behind proxies: trusted hops are skipped, from the right.
    chain = request("10.1.2.3", xff="192.0.2.66, 203.0.113.1, 10.9.9.9")
    assert client_address(chain, PROXIES) == "203.0.113.1"
    # Nobody but trusted proxies: the leftmost of them.
    assert client_address(request("10.1.2.3", xff="10.0.0.5"), PROXIES) == "10.0.0.5"
    # Without a header the proxy itself is the client.
    assert client_address(request("10.1.2.3"), PROXIES) == "10.1.2.3"


def test_forwarded_is_read_when_there_is_no_x_forwarded_for() -> None:
    forwarded = 'for=192.0.2.66;proto=https, for="[2001:db8:1:2::7]:4711";by=10.0.0.1'
    assert client_address(request("10.1.2.3", forwarded=forwarded), PROXIES) == "2001:db8:1:2::/64"
    ported = request("10.1.2.3", forwarded="for=203.0.113.1:8080")
    assert client_address(ported, PROXIES) == "203.0.113.1"
    both = request("10.1.2.3", xff="203.0.113.1", forwarded="for=192.0.2.66")
    assert client_address(both, PROXIES) == "203.0.113.1"


def test_an_unreadable_hop_stops_the_walk_at_the_proxy_that_passed_it_on() -> None:
    for junk in ("unknown", "_hidden", "not an address", ""):
        sent = request("10.1.2.3", xff=f"203.0.113.1, {junk}")
        assert client_address(sent, PROXIES) == "10.1.2.3", junk


def test_an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_is_ipv4() -> None:
    one, other = request("2001:db8:1:2::1"), request("2001:db8:1:2:ffff::9")
    assert client_address(one, ()) == client_address(other, ()) == "2001:db8:1:2::/64"
    assert client_address(request("2001:db8:1:3::1"), ()) == "2001:db8:1:3::/64"
    assert client_address(request("::ffff:192.0.2.1"), ()) == "192.0.2.1"
    via_v6_proxy = request("2001:db8:ffff:1::1", xff="192.0.2.1")
    assert client_address(via_v6_proxy, PROXIES) == "192.0.2.1"


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "proxy.internal", "10.0.0.1, nonsense"])
def test_trusted_proxies_that_are_not_networks_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="SLUICE_TRUSTED_PROXIES"):
        trusted_networks(bad)
