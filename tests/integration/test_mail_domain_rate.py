"""SLUICE_MAIL_DOMAIN_RATE: a burst of mail to one recipient domain is spread at the
domain's rate while another domain's mail goes out at once, and the mails that waited
spent no deliveries (none dead-lettered with two allowed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from sluice.app.running import group_spec
from sluice.app.testing import wait_for
from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.settings import AccountsSettings
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.errors import ConfigError
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from tests.integration.mail_helpers import dead_letters, drained, smtp_server

pytestmark = pytest.mark.topologies("single", "cluster")

BURST, OTHERS, RATE = 8, 3, 2  # mails to busy.example, to calm.example; a second


async def test_a_burst_to_one_domain_is_spread_and_another_domain_is_not_held_up(
    resources: Resources,
    make_config: Callable[..., Config],
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    with smtp_server() as server:
        config = make_config(
            smtp_url=server.url,
            mail_rate=1000,
            mail_domain_rate=f"{RATE}/s",
            max_deliveries=2,
            retry_base_ms=50,
        )
        res = dataclasses.replace(resources, config=config)
        start_worker(
            spec=group_spec(mail.mail_group, res, mail.build_deps(res)), name="w1", config=config
        )
        start_relay()
        registered = [("busy", i) for i in range(BURST)] + [("calm", i) for i in range(OTHERS)]
        for domain, i in registered:
            async with resources.store.transaction() as tx:
                await tx.append(
                    UserRegistered(
                        user_id=f"{domain}{i}", email=f"u{i}@{domain}.example", name=f"U {i}"
                    )
                )

        async def settled() -> bool:
            return len(server.messages()) == BURST + OTHERS and await drained(resources)

        await wait_for(settled, timeout=60)
        received = server.messages()
    busy = sorted(r.at for r in received if r.rcpt_tos[0].endswith("@busy.example"))
    calm = sorted(r.at for r in received if r.rcpt_tos[0].endswith("@calm.example"))
    assert (len(busy), len(calm)) == (BURST, OTHERS)
    # 8 mails at 2 a second (a burst of 1): at least 7 intervals of 0.5 s, give or take
    # the moment each send reached the server.
    assert busy[-1] - busy[0] >= (BURST - 1) / RATE - 0.4
    # The other domain's mail, committed after the burst, went out long before its end.
    assert calm[-1] < busy[-1] - 1.5
    assert await dead_letters(resources) == []


def test_a_malformed_domain_rate_refuses_the_start(make_config: Callable[..., Config]) -> None:
    config = make_config(mail_domain_rate="lots")
    with pytest.raises(ConfigError, match="SLUICE_MAIL_DOMAIN_RATE"):
        AccountsSettings.of(config)
