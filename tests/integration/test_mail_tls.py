"""STARTTLS and login against a real SMTP server that requires both; logs keep secrets out.

The server's certificate is made for the test by ``openssl`` and trusted by
the client through its own context; the credentials travel percent-encoded
in ``SLUICE_SMTP_URL``.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from sluice.builtin.accounts.keys import AccountsKeys
from sluice.builtin.accounts.mail import templates
from sluice.builtin.accounts.mail.idempotency import SendLog
from sluice.builtin.accounts.mail.ratelimit import RateLimiter
from sluice.builtin.accounts.mail.sending import Mailer, Outgoing
from sluice.builtin.accounts.mail.settings import parse_smtp_url
from sluice.builtin.accounts.mail.transport import SmtpTransport
from sluice.errors import HandlerError
from sluice.process.resources import Resources
from tests.integration.mail_helpers import SmtpServer, sent_keys, smtp_server

USER = "mailer"
PASSWORD = "p@ss:w/rd s3cret"
ENCODED = "p%40ss%3Aw%2Frd%20s3cret"


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


class Logins:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []  # (login, over TLS)

    def __call__(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.seen.append((data.login.decode(), session.ssl is not None))
        ok = data.login == USER.encode() and data.password == PASSWORD.encode()
        return AuthResult(success=ok, handled=False)  # False: aiosmtpd answers the 535


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[tuple[SmtpServer, Logins]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    logins = Logins()
    with smtp_server(
        tls_context=context,
        require_starttls=True,
        auth_required=True,
        auth_require_tls=True,
        authenticator=logins,
    ) as server:
        yield server, logins


def mailer(resources: Resources, url: str, cafile: Path) -> Mailer:
    transport = SmtpTransport(
        parse_smtp_url(url), tls_context=ssl.create_default_context(cafile=cafile)
    )
    limiter = RateLimiter(resources.redis, AccountsKeys(resources.keys.prefix).mail_rate(), 50)
    return Mailer(SendLog(resources.store), limiter, transport, "sluice@sluice.test")


def welcome(user_id: str) -> Outgoing:
    return Outgoing(
        key=f"welcome_{user_id}",
        recipient="ada@example.org",
        recipient_name="Ada",
        content=templates.welcome(
            "Ada", "http://sluice.test", "http://sluice.test/v1/verify?token=t"
        ),
    )


async def test_starttls_then_login_delivers_and_logs_one_line_without_secrets(
    resources: Resources, tls_server: tuple[SmtpServer, Logins], certificate: tuple[Path, Path]
) -> None:
    server, logins = tls_server
    url = f"smtp://{USER}:{ENCODED}@127.0.0.1:{server.port}?starttls=true"
    sender = mailer(resources, url, certificate[0])
    with (
        structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]
        ) as logs,
        structlog.contextvars.bound_contextvars(trace_id="trace-42"),
    ):
        assert await sender.send_once(welcome("u1")) is True
        assert await sender.send_once(welcome("u1")) is False  # already sent

    assert logins.seen == [(USER, True)]
    [received] = server.messages()
    assert received.message_id == "<welcome_u1@sluice.test>"
    sent = [e for e in logs if e["event"] == "mail sent"]
    assert sent == [
        {
            "event": "mail sent",
            "log_level": "info",
            "key": "welcome_u1",
            "recipient_domain": "example.org",
            "transport": "smtp",
            "trace_id": "trace-42",
        }
    ]
    assert any(e["event"] == "mail already sent, skipped" for e in logs)
    text = json.dumps(logs, default=str) + repr(sender) + sender.transport.describe()
    assert PASSWORD not in text and ENCODED not in text and "s3cret" not in text


async def test_a_rejected_login_is_permanent_and_does_not_reveal_the_password(
    resources: Resources, tls_server: tuple[SmtpServer, Logins], certificate: tuple[Path, Path]
) -> None:
    server, _ = tls_server
    url = f"smtp://{USER}:wrong-s3cret@127.0.0.1:{server.port}?starttls=true"
    with pytest.raises(HandlerError) as failure:
        await mailer(resources, url, certificate[0]).send_once(welcome("u2"))

    assert failure.value.permanent
    assert str(failure.value).startswith("SMTP 535")
    assert "s3cret" not in str(failure.value)
    assert server.messages() == []
    assert await sent_keys(resources) == {}  # released


async def test_plain_smtp_to_a_server_that_requires_starttls_is_refused_permanently(
    resources: Resources, tls_server: tuple[SmtpServer, Logins], certificate: tuple[Path, Path]
) -> None:
    server, _ = tls_server
    with pytest.raises(HandlerError) as failure:
        await mailer(resources, server.url, certificate[0]).send_once(welcome("u3"))

    assert failure.value.permanent
    assert "530" in str(failure.value)  # "Must issue a STARTTLS command first"
    assert server.messages() == []
