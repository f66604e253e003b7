"""Webhook targets and signatures: which addresses are refused, and a signature any
Standard Webhooks library accepts."""

from __future__ import annotations

import ipaddress
import socket
import time

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from standardwebhooks.webhooks import Webhook as Verifier

from sluice.builtin.links.webhooks.signing import generate_secret, secret_key, signature
from sluice.builtin.links.webhooks.targets import (
    PinnedResolver,
    TargetRefused,
    check_literal,
    forbidden,
)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "2002:7f00:1::1",
    ],
)
def test_non_public_addresses_are_forbidden(address: str) -> None:
    assert forbidden(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1::1", "::ffff:8.8.8.8"])
def test_public_addresses_are_not(address: str) -> None:
    assert not forbidden(ipaddress.ip_address(address))


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.0.0.1", "localhost", "a.localhost"])
def test_literal_spellings_and_loopback_names(host: str) -> None:
    with pytest.raises(TargetRefused):
        check_literal(host)


class Rebinding(AbstractResolver):
    """A public address and a private one for the same name."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            {
                "hostname": host,
                "host": a,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
            for a in ("93.184.216.34", "10.0.0.5")
        ]

    async def close(self) -> None:
        pass


async def test_a_name_with_any_private_address_is_refused() -> None:
    with pytest.raises(TargetRefused) as refused:
        await PinnedResolver(Rebinding()).resolve("hooks.example.org", 443)
    # The owner reads the message in the deliveries: it never names the internal answer;
    # the operator's log gets the address from the exception.
    assert str(refused.value) == "hooks.example.org resolves to a non-public address"
    assert refused.value.address == "10.0.0.5"


def test_signatures_verify_with_the_standard_library() -> None:
    secret = generate_secret()
    body = b'{"type":"link.created","version":1,"data":{}}'
    timestamp = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret_key(secret), "msg_1", timestamp, body),
    }
    assert Verifier(secret).verify(body, headers)["type"] == "link.created"
