"""``Mailer.send_once`` with a fake transport: what is sent, skipped, released, never sent.

The store is real SQLite; the rate limiter is off (rate 0: no Redis needed).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from sluice.app.assembly import open_store
from sluice.builtin.accounts.mail import templates
from sluice.builtin.accounts.mail.idempotency import CouldNotCheck, Outcome, SendLog
from sluice.builtin.accounts.mail.ratelimit import RateLimiter
from sluice.builtin.accounts.mail.sending import Mailer, Outgoing
from sluice.builtin.accounts.mail.settings import SmtpSettings
from sluice.builtin.accounts.mail.transport import EmlTransport, SmtpTransport, reply_error
from sluice.config import load_config
from sluice.embedded.redis_server import free_port
from sluice.errors import HandlerError
from sluice.store import Store


class FakeTransport:
    name = "fake"

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.sent: list[EmailMessage] = []

    def describe(self) -> str:
        return "fake"

    async def send(self, message: EmailMessage, key: str) -> bool:
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append(message)
        return True


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(load_config({}, data_dir=tmp_path))
    try:
        yield opened
    finally:
        await opened.close()


def make_mailer(sends: SendLog, transport: Any) -> Mailer:
    unlimited = RateLimiter(aioredis.Redis(port=free_port()), "unused", 0)
    return Mailer(sends, unlimited, transport, "sluice@sluice.example")


def welcome(user_id: str = "u1") -> Outgoing:
    return Outgoing(
        key=f"welcome_{user_id}",
        recipient="ada@example.org",
        content=templates.welcome("Ada", "http://x", "http://x/v1/verify?token=t"),
    )


async def test_sent_once_then_skipped(store: Store) -> None:
    transport = FakeTransport()
    mailer = make_mailer(SendLog(store), transport)
    assert await mailer.send_once(welcome()) is True
    assert await mailer.send_once(welcome()) is False
    assert [m["Message-ID"] for m in transport.sent] == ["<welcome_u1@sluice.example>"]


@pytest.mark.parametrize(
    "failure",
    [reply_error(451, "4.3.0 later"), reply_error(550, "5.1.1 unknown"), ConnectionError("reset")],
)
async def test_a_failed_send_releases_the_key_and_the_retry_sends(
    store: Store, failure: Exception
) -> None:
    transport = FakeTransport(failure)
    mailer = make_mailer(SendLog(store), transport)
    with pytest.raises(type(failure)):
        await mailer.send_once(welcome())
    assert await store.fetchall("SELECT * FROM mail_sends") == []
    assert await mailer.send_once(welcome()) is True
    assert len(transport.sent) == 1


async def test_could_not_check_never_sends(store: Store) -> None:
    class Blind(SendLog):
        async def reserve(self, key: str, recipient: str) -> Any:
            raise CouldNotCheck("could not check: database is locked")

    transport = FakeTransport()
    with pytest.raises(CouldNotCheck):
        await make_mailer(Blind(store), transport).send_once(welcome())
    assert transport.sent == []


async def test_a_key_held_by_a_live_sender_waits_for_its_outcome_and_skips(
    store: Store,
) -> None:
    sends = SendLog(store)
    other = await sends.reserve("welcome_u1", "ada@example.org")  # another worker, mid-send
    transport = FakeTransport()
    attempt = asyncio.create_task(make_mailer(sends, transport).send_once(welcome()))
    await asyncio.sleep(0.2)
    assert not attempt.done()  # waiting, not sending
    await sends.mark_sent(other)
    assert await attempt is False
    assert transport.sent == []


async def test_after_a_crash_between_250_and_sent_the_mail_goes_out_again_after_the_lease(
    store: Store,
) -> None:
    """The documented window: the crashed holder's reservation blocks until its lease ends."""
    sends = SendLog(store, lease=timedelta(seconds=0.5))
    crashed = await sends.reserve("welcome_u1", "ada@example.org")
    assert crashed.outcome is Outcome.RESERVED  # ...its mail was accepted, then kill -9
    transport = FakeTransport()
    started = asyncio.get_running_loop().time()
    assert await make_mailer(sends, transport).send_once(welcome()) is True
    assert asyncio.get_running_loop().time() - started >= 0.3  # not before the lease ran out
    assert len(transport.sent) == 1


async def test_a_mail_that_cannot_be_recorded_keeps_its_reservation(store: Store) -> None:
    class Forgetful(SendLog):
        async def _record_sent(self, reservation: Any) -> None:
            raise sqlite3.OperationalError("disk I/O error")

    sends = Forgetful(store, lease=timedelta(seconds=1))
    with pytest.raises(HandlerError, match="was sent but could not be recorded"):
        await make_mailer(sends, FakeTransport()).send_once(welcome())
    [(state,)] = await store.fetchall("SELECT state FROM mail_sends")
    assert state == "reserved"  # not released: no immediate second copy


async def test_eml_files_are_written_once_atomically(tmp_path: Path) -> None:
    transport = EmlTransport(tmp_path / "mail")
    message = EmailMessage()
    message["Subject"] = "hi"
    message.set_content("body")
    assert await transport.send(message, "welcome_u1") is True
    assert await transport.send(message, "welcome_u1") is False
    assert [p.name for p in (tmp_path / "mail").iterdir()] == ["welcome_u1.eml"]
    assert b"Subject: hi\r\n" in (tmp_path / "mail" / "welcome_u1.eml").read_bytes()


async def test_an_unwritable_mail_directory_is_a_transient_failure(tmp_path: Path) -> None:
    (tmp_path / "mail").write_text("a file where the directory should be")
    message = EmailMessage()
    message.set_content("body")
    with pytest.raises(HandlerError) as error:
        await EmlTransport(tmp_path / "mail").send(message, "welcome_u1")
    assert not error.value.permanent


def test_5xx_replies_are_permanent_and_4xx_transient() -> None:
    assert reply_error(550, "5.1.1 No such user").permanent
    assert str(reply_error(550, "5.1.1 No such user")) == "SMTP 550 5.1.1 No such user"
    assert not reply_error(421, "4.7.0 Try later").permanent
    assert not reply_error(451, "").permanent


async def test_a_refused_connection_is_a_transient_failure() -> None:
    transport = SmtpTransport(SmtpSettings("127.0.0.1", free_port(), timeout=2))
    message = EmailMessage()
    message["From"], message["To"] = "a@example.org", "b@example.org"
    message.set_content("body")
    with pytest.raises(HandlerError) as error:
        await transport.send(message, "welcome_u1")
    assert not error.value.permanent
    assert str(error.value).startswith("SMTP unavailable: SMTPConnectError")
