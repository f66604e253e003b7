"""Where mail goes: a real SMTP server (aiosmtplib), or ``.eml`` files under the data dir.

A transport either returns (the message is delivered, or was delivered
before) or raises a ``HandlerError``: permanent for a 5xx reply, which goes
straight to the dead letters with the reply in the error, transient for a 4xx
reply, a refused or dropped connection or a timeout, which the runtime
retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.policy
import os
import ssl
import uuid
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol

import aiosmtplib

from sluice.app import Config, HandlerError
from sluice.builtin.accounts.mail.settings import SmtpSettings, parse_smtp_url
from sluice.builtin.accounts.settings import AccountsSettings


class Transport(Protocol):
    name: str

    async def send(self, message: EmailMessage, key: str) -> bool:
        """Deliver ``message``; False when it had been delivered before (nothing sent now)."""

    def describe(self) -> str: ...


def reply_error(code: int, message: str) -> HandlerError:
    """A 5xx reply is permanent; anything else the server answered is worth a retry."""
    text = f"SMTP {code} {message}".strip()
    return HandlerError(text, permanent=500 <= code < 600)


class SmtpTransport:
    name = "smtp"

    def __init__(self, settings: SmtpSettings, *, tls_context: ssl.SSLContext | None = None):
        self.settings = settings
        self.tls_context = tls_context  # tests trust their own CA; None: the system's

    def describe(self) -> str:
        return self.settings.redacted()

    def _client(self) -> aiosmtplib.SMTP:
        s = self.settings
        return aiosmtplib.SMTP(
            hostname=s.host,
            port=s.port,
            username=s.username,
            password=s.password,
            use_tls=s.use_tls,
            start_tls=s.start_tls,
            timeout=s.timeout,
            tls_context=self.tls_context,
        )

    async def send(self, message: EmailMessage, key: str) -> bool:
        client = self._client()
        try:
            await client.connect()
            await client.send_message(message)
        except BaseException as exc:
            client.close()
            failure = smtp_failure(exc) if isinstance(exc, Exception) else None
            if failure is None:
                raise
            raise failure from exc
        # Accepted (250): nothing after this point may turn it into a failure.
        try:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError, TimeoutError):
                await client.quit()
        finally:
            client.close()
        return True


def smtp_failure(exc: Exception) -> HandlerError | None:
    """The ``HandlerError`` for an SMTP failure; None for an error that is not SMTP's."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused) and exc.recipients:
        return reply_error(exc.recipients[0].code, exc.recipients[0].message)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return reply_error(exc.code, exc.message)
    if isinstance(exc, (aiosmtplib.SMTPException, OSError, TimeoutError)):
        return HandlerError(f"SMTP unavailable: {type(exc).__name__}: {exc}")
    return None


class EmlTransport:
    """One ``<key>.eml`` file per mail; an existing file means the mail was delivered."""

    name = "eml"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> str:
        return str(self.directory)

    async def send(self, message: EmailMessage, key: str) -> bool:
        data = message.as_bytes(policy=email.policy.SMTP)
        try:
            return await asyncio.to_thread(self._write, self.directory / f"{key}.eml", data)
        except OSError as exc:
            raise HandlerError(f"cannot write mail file: {exc}") from exc

    @staticmethod
    def _write(path: Path, data: bytes) -> bool:
        if path.exists():
            return False
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A reader never sees half a mail: write aside, flush to disk, rename in place.
        # Owner only (a mail holds an address and the links sent to it).
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return True


def make_transport(config: Config) -> Transport:
    """SMTP when ``SLUICE_SMTP_URL`` is set, else ``.eml`` files under ``<data dir>/mail``."""
    smtp_url = AccountsSettings.of(config).smtp_url
    if smtp_url:
        return SmtpTransport(parse_smtp_url(smtp_url))
    return EmlTransport(config.data_dir / "mail")
