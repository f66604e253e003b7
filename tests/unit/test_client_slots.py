"""Whose connection slots a peer address counts against (docs/guides/security.md,
"Connection slots"): an IPv4 address each, an IPv6 /64 each, and an IPv4 client seen by
a dual-stack listener as itself, not as one /64 shared by every IPv4 client."""

from __future__ import annotations

import pytest

from sluice.http.client_slots import AddressSlots, slot_key


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"),
        ("2001:db8:1:2:a:b:c:d", "2001:0db8:0001:0002:0000:0000:0000:0001"),
        ("fe80::1%eth0", "fe80::2%eth1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
    ],
)
def test_addresses_of_one_client_share_their_slots(one: str, other: str) -> None:
    assert slot_key(one) == slot_key(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("127.0.0.3", "127.0.0.4"),
        ("2001:db8:1:2::1", "2001:db8:1:3::1"),
        ("::ffff:192.0.2.7", "::ffff:192.0.2.8"),  # not the one /64 of ::ffff:0:0/96
        ("192.0.2.7", "2001:db8::1"),
    ],
)
def test_other_clients_have_slots_of_their_own(one: str, other: str) -> None:
    assert slot_key(one) != slot_key(other)


def test_an_ipv6_client_is_named_by_its_64() -> None:
    assert slot_key("2001:db8:1:2:a:b:c:d") == "2001:db8:1:2::/64"
    assert slot_key("192.0.2.7") == "192.0.2.7"


def test_an_address_takes_its_share_and_gets_slots_back_as_connections_end() -> None:
    slots = AddressSlots(per_address=2)
    assert slots.take("a") and slots.take("a")
    assert not slots.take("a")  # its share is used up
    assert slots.take("b")  # another address still gets one
    slots.give_back("a")
    assert slots.take("a")
    for _ in range(2):
        slots.give_back("a")
    slots.give_back("b")
    assert len(slots) == 0  # addresses gone leave nothing behind
