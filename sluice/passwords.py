"""Password hashing with scrypt (memory-hard, in the standard library).

Hashes are stored as ``scrypt$n$r$p$salt$hash`` (base64), so the cost can be
raised later and old hashes still verify. Hashing takes tens of milliseconds
and 16 MiB by design: callers run it in a thread, never on the event loop, through a
``PasswordHasher``, which bounds how many run at once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import secrets
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sluice.errors import Overloaded

T = TypeVar("T")

N, R, P = 2**14, 8, 1
_MAXMEM = 64 * 1024 * 1024


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=_MAXMEM)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt),
            n=int(n), r=int(r), p=int(p), maxmem=_MAXMEM, dklen=len(expected),
        )  # fmt: skip
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


# Verified against when the email is unknown, so both failures cost the same time.
DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


class PasswordHasher:
    """Hashes and checks passwords in threads of its own, at most ``limit`` at once.

    A hash beyond the limit waits for a slot in a bounded queue: at most ``queue`` wait,
    each at most ``wait`` seconds, first come first served, so a burst of sign-ups (ten
    at once, or fifty) is answered, only later. What is beyond the queue, or still
    waiting after ``wait`` seconds, is refused (``Overloaded``: 503, ``Retry-After``):
    every hash costs the same CPU, so a longer queue (logins for random emails, thirty a
    second) would only make each login behind it wait longer, a real one for many
    seconds. A slot is taken until its thread finishes, also when the request that
    asked for it is gone, so no more than ``limit`` hashes ever run at once; a slot
    that frees goes to the queue's oldest waiter.
    """

    RETRY_AFTER = 1  # seconds: a hash takes tens of milliseconds

    def __init__(self, limit: int, queue: int = 0, wait: float = 0.0) -> None:
        self.limit = limit
        self.queue = queue
        self.wait = wait
        self.busy = 0  # slots taken: hashes running, or handed to a waiter about to start
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._threads = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="password")

    @property
    def waiting(self) -> int:
        """Hashes in the queue for a slot."""
        return len(self._waiting)  # a slot leaves it when handed over or given up

    def admit(self) -> None:
        """503 at once when a hash asked for now would be refused: a request checks this
        first, so a refused one costs nothing else (no Redis, no database)."""
        if self.busy >= self.limit and self.waiting >= self.queue:
            raise self._full()

    async def hash(self, password: str) -> str:
        return await self._run(hash_password, password)

    async def verify(self, password: str, stored: str) -> bool:
        return await self._run(verify_password, password, stored)

    async def _run(self, work: Callable[..., T], *args: str) -> T:
        loop = asyncio.get_running_loop()
        if self.busy < self.limit and not self.waiting:
            self.busy += 1
        else:
            await self._slot(loop)  # a slot handed over: ``busy`` counts it already
        try:
            future = self._threads.submit(work, *args)
        except BaseException:  # shut down: the slot is not used
            self._release()
            raise
        future.add_done_callback(lambda _: _call_soon(loop, self._release))
        return await asyncio.wrap_future(future)

    async def _slot(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for a slot in the queue; 503 when the queue is full or the wait too long."""
        if self.waiting >= self.queue:
            raise self._full()
        slot: asyncio.Future[None] = loop.create_future()
        self._waiting.append(slot)
        try:
            async with asyncio.timeout(self.wait):
                await slot
        except BaseException as exc:
            if slot.done() and not slot.cancelled():
                self._release()  # handed a slot just as the wait ended: pass it on
            else:
                slot.cancel()
                with contextlib.suppress(ValueError):  # a release may have dropped it
                    self._waiting.remove(slot)
            if isinstance(exc, TimeoutError):
                raise Overloaded(
                    "this server waited too long for a free password check; try again",
                    self.RETRY_AFTER,
                ) from None
            raise

    def _full(self) -> Overloaded:
        return Overloaded(
            "this server is checking as many passwords as it can; try again in a moment",
            self.RETRY_AFTER,
        )

    def _release(self) -> None:
        """A slot is free: the oldest waiter takes it, else it is given back."""
        while self._waiting:
            slot = self._waiting.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        self.busy -= 1

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to count
        loop.call_soon_threadsafe(callback)
