"""The mail group against a real SMTP server on loopback (aiosmtpd), and the .eml fallback.

Registrations are committed to the store as the API does; the relay and a
mail worker run in the test process. Every test waits until the group has
drained (published, read, acked, no retry waiting) before it counts mails.
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
from collections.abc import Callable
from typing import Any

import pytest

from sluice.app.running import group_spec
from sluice.app.testing import wait_for
from sluice.builtin.accounts.mail import group as mail
from sluice.builtin.accounts.settings import AccountsSettings
from sluice.config import Config
from sluice.consumers.consumer import Consumer
from sluice.process.resources import Resources
from sluice.relay.relay import Relay
from sluice.streams.failures import Failures
from sluice.streams.spec import GroupSpec
from tests.integration.mail_helpers import (
    GROUP,
    SmtpServer,
    dead_letters,
    drained,
    register,
    sent_keys,
    smtp_server,
)

pytestmark = pytest.mark.topologies("single", "cluster")


def mail_spec(resources: Resources, config: Config) -> GroupSpec:
    return group_spec(mail.mail_group, dataclasses.replace(resources, config=config))


async def until_drained(resources: Resources) -> None:
    async def settled() -> bool:
        return await drained(resources)

    await wait_for(settled)


async def publish_again(resources: Resources) -> None:
    """Publish every committed event once more, as a relay that crashed before its position."""
    events = await resources.store.events_after(0, 1000)
    async with Relay(resources.store, resources.redis, resources.keys) as relay:
        await relay.publish(events)


@pytest.fixture
def server() -> Any:
    with smtp_server() as running_server:
        yield running_server


async def test_one_welcome_mail_per_registration_and_none_on_redelivery(
    resources: Resources,
    make_config: Callable[..., Config],
    server: SmtpServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(smtp_url=server.url, mail_from="Sluice <hello@sluice.test>")
    start_relay()
    start_worker(spec=mail_spec(resources, config), config=config)
    users = await register(resources, 5)
    await until_drained(resources)

    received = server.messages()
    assert sorted(r.message_id for r in received) == [
        f"<welcome_{u.user_id}@sluice.test>" for u in users
    ]
    first = next(r for r in received if r.message_id == "<welcome_u0000@sluice.test>")
    assert first.rcpt_tos == ["user0@example.org"]
    assert first.message["To"] == "User 0 <user0@example.org>"
    assert first.message["Subject"] == "Welcome to sluice"
    assert "Hello User 0," in first.message.get_content()
    assert await sent_keys(resources) == {f"welcome_{u.user_id}": "sent" for u in users}

    await publish_again(resources)  # same events, new stream entries
    await until_drained(resources)
    assert len(server.messages()) == 5


async def test_two_4xx_replies_then_acceptance_deliver_once_after_three_deliveries(
    resources: Resources,
    make_config: Callable[..., Config],
    server: SmtpServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    config = make_config(smtp_url=server.url)
    server.recorder.answer("DATA", "451 4.3.0 Try again later", "452 4.3.1 Out of memory")
    start_relay()
    consumer = start_worker(spec=mail_spec(resources, config), config=config)
    await register(resources, 1)
    await until_drained(resources)

    assert len(server.messages()) == 1
    assert server.recorder.attempts["DATA"] == 3
    assert consumer.counters.retried == 2
    assert consumer.counters.dead == 0
    assert await sent_keys(resources) == {"welcome_u0000": "sent"}


@pytest.mark.parametrize(
    ("stage", "reply"),
    [("RCPT", "550 5.1.1 No such user"), ("DATA", "554 5.6.0 Message rejected")],
)
async def test_a_5xx_reply_goes_to_the_dead_letters_after_one_attempt(
    resources: Resources,
    make_config: Callable[..., Config],
    server: SmtpServer,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
    stage: str,
    reply: str,
) -> None:
    config = make_config(smtp_url=server.url)
    server.recorder.answer(stage, reply)
    start_relay()
    consumer = start_worker(spec=mail_spec(resources, config), config=config)
    await register(resources, 1)
    await until_drained(resources)

    [dead] = await dead_letters(resources)
    assert dead[b"deliveries"] == b"1"
    assert f"SMTP {reply}".encode() in dead[b"error"]
    assert server.recorder.attempts[stage] == 1
    assert server.messages() == []
    assert consumer.counters.retried == 0
    assert await sent_keys(resources) == {}  # released: a redrive may send

    keys = resources.keys
    partition = keys.partition_of("u0000")  # the user's: where its letter is
    entries: Any = await resources.redis.xrange(keys.dead(GROUP, partition))
    dead_id = entries[0][0].decode()
    assert await Failures(resources.redis, keys, GROUP, partition).redrive(dead_id)

    async def delivered() -> bool:
        return len(server.messages()) == 1

    await wait_for(delivered)
    await until_drained(resources)
    assert len(server.messages()) == 1
    assert await sent_keys(resources) == {"welcome_u0000": "sent"}


async def test_without_an_smtp_server_mail_is_written_as_eml_files_once(
    resources: Resources,
    start_relay: Callable[..., Relay],
    start_worker: Callable[..., Consumer],
) -> None:
    assert AccountsSettings.of(resources).smtp_url is None
    start_relay()
    start_worker(group=GROUP)
    users = await register(resources, 3)
    await until_drained(resources)

    directory = resources.config.data_dir / "mail"
    files = sorted(directory.iterdir())
    assert [f.name for f in files] == [f"welcome_{u.user_id}.eml" for u in users]
    parsed = email.message_from_bytes(files[0].read_bytes(), policy=email.policy.default)
    assert parsed["To"] == "User 0 <user0@example.org>"
    assert parsed["Message-ID"] == "<welcome_u0000@localhost>"
    written = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in files}

    await publish_again(resources)
    await until_drained(resources)
    after = {f.name: (f.stat().st_mtime_ns, f.read_bytes()) for f in sorted(directory.iterdir())}
    assert after == written  # no new file, none rewritten, no temporary left behind
