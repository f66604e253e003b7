"""Shared pieces of the mail tests (no tests here): a real SMTP server on loopback.

``SmtpServer`` is an aiosmtpd ``Controller`` on a free loopback port, in its
own thread, started and stopped by the test. Its handler records every
message it accepts and answers the replies a test scripted (``451 ...``
twice, ``550 ...``) before it goes back to accepting.
"""

from __future__ import annotations

import email
import email.policy
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import redis.exceptions
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from sluice.builtin.accounts.events import UserRegistered
from sluice.embedded.redis_server import free_port
from sluice.process.resources import Resources
from sluice.relay.relay import POSITION

GROUP = "mail"


@dataclass(frozen=True)
class Received:
    message: EmailMessage
    rcpt_tos: list[str]
    at: float  # time.time() when the server accepted it

    @property
    def message_id(self) -> str:
        return str(self.message["Message-ID"])


class Recorder:
    """aiosmtpd handler: scripted replies per stage, then acceptance; records what it took."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.attempts = {"RCPT": 0, "DATA": 0}
        self.script: dict[str, deque[str]] = {"RCPT": deque(), "DATA": deque()}
        # Runs in the server's thread when a DATA was accepted, before the 250 goes out.
        self.on_accept: Callable[[Received], None] | None = None

    def answer(self, stage: str, *replies: str) -> None:
        """Answer the next ``len(replies)`` commands of ``stage`` with these replies."""
        with self.lock:
            self.script[stage].extend(replies)

    def _next(self, stage: str) -> str | None:
        with self.lock:
            self.attempts[stage] += 1
            return self.script[stage].popleft() if self.script[stage] else None

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        reply = self._next("RCPT")
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        reply = self._next("DATA")
        if reply is not None:
            return reply
        raw = envelope.original_content or b""
        parsed = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        received = Received(parsed, list(envelope.rcpt_tos), time.time())
        with self.lock:
            self.received.append(received)
        if self.on_accept is not None:
            self.on_accept(received)
        return "250 Message accepted for delivery"

    def messages(self) -> list[Received]:
        with self.lock:
            return list(self.received)


class SmtpServer:
    def __init__(self, recorder: Recorder, **smtp_options: Any) -> None:
        self.recorder = recorder
        self.port = free_port()
        self.controller = Controller(recorder, hostname="127.0.0.1", port=self.port, **smtp_options)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def messages(self) -> list[Received]:
        return self.recorder.messages()


@contextmanager
def smtp_server(**smtp_options: Any) -> Iterator[SmtpServer]:
    """A real SMTP server on a free loopback port for the duration of the block."""
    server = SmtpServer(Recorder(), **smtp_options)
    server.controller.start()
    try:
        yield server
    finally:
        server.controller.stop()


async def register(resources: Resources, n: int, *, start: int = 0) -> list[UserRegistered]:
    """Commit ``n`` registrations, one transaction each, as the API does."""
    events = []
    for i in range(start, start + n):
        event = UserRegistered(
            user_id=f"u{i:04d}", email=f"user{i}@example.org", name=f"User {i}", trace_id=f"t{i}"
        )
        async with resources.store.transaction() as tx:
            await tx.append(event)
        events.append(event)
    return events


def _group_state(info: Any, groups: Any) -> tuple[int, bool]:
    """(pending, read to the end) of the mail group, from XINFO STREAM and XINFO GROUPS of
    one stream (errors when it does not exist: nothing in it)."""
    if isinstance(info, redis.exceptions.ResponseError):
        return 0, True
    for row in groups:
        name = row["name"].decode() if isinstance(row["name"], bytes) else row["name"]
        if name == GROUP:
            return int(row["pending"]), row["last-delivered-id"] == info["last-generated-id"]
    return 0, int(info["length"]) == 0


async def drained(resources: Resources, aggregates: tuple[str, ...] = ("users",)) -> bool:
    """Everything committed was published, read and acked by the mail group on the streams
    of ``aggregates`` in every partition; no retry waits in any.

    Each partition is read in one MULTI: each move of an entry (acked and delayed, delayed
    to the retry stream) is one script on one partition's keys, so a snapshot sees it in
    exactly one place. Read one after the other, an entry could move from the delayed set
    to the retry stream between the two reads and be seen in neither."""
    keys = resources.keys
    if await resources.store.position(POSITION) < await resources.store.max_seq():
        return False
    # On a cluster, redis-py 8.1 runs a MULTI's queued commands on threads with loops of
    # their own: a client that has not read the slot map yet would read it there.
    await resources.redis.ping()
    for partition in keys.numbers:
        streams = [keys.stream(a, partition) for a in aggregates]
        async with resources.redis.pipeline(transaction=True) as pipe:
            for stream in (*streams, keys.retry(GROUP, partition)):
                pipe.xinfo_stream(stream)
                pipe.xinfo_groups(stream)
            pipe.zcard(keys.delayed(GROUP, partition))
            *states, delayed = await pipe.execute(raise_on_error=False)
        for info, groups in zip(states[0::2], states[1::2], strict=True):
            pending, caught_up = _group_state(info, groups)
            if pending or not caught_up:
                return False
        if int(delayed):
            return False
    return True


async def sent_keys(resources: Resources) -> dict[str, str]:
    rows = await resources.store.fetchall("SELECT key, state FROM mail_sends")
    return {str(key): str(state) for key, state in rows}


async def dead_letters(resources: Resources) -> list[dict[bytes, bytes]]:
    """The mail group's dead letters, of every partition."""
    keys = resources.keys
    letters: list[dict[bytes, bytes]] = []
    for partition in keys.numbers:
        entries: Any = await resources.redis.xrange(keys.dead(GROUP, partition))
        letters += [fields for _, fields in entries]
    return letters
