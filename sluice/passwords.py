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

    One more is refused at once (``Overloaded``: 503, ``Retry-After: 1``) rather than
    queued: every hash costs the same CPU, so a queue of them (logins for random
    emails, thirty a second) only makes each login behind it wait longer, a real one
    six seconds. A slot is taken until its thread finishes, also when the request that
    asked for it is gone, so no more than ``limit`` hashes ever run at once.
    """

    RETRY_AFTER = 1  # seconds: a hash takes tens of milliseconds

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0
        self._threads = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="password")

    async def hash(self, password: str) -> str:
        return await self._run(hash_password, password)

    async def verify(self, password: str, stored: str) -> bool:
        return await self._run(verify_password, password, stored)

    async def _run(self, work: Callable[..., T], *args: str) -> T:
        if self.busy >= self.limit:
            raise Overloaded(
                "this server is checking as many passwords as it can; try again in a moment",
                self.RETRY_AFTER,
            )
        loop = asyncio.get_running_loop()
        self.busy += 1
        future = self._threads.submit(work, *args)
        future.add_done_callback(lambda _: _call_soon(loop, self._release))
        return await asyncio.wrap_future(future)

    def _release(self) -> None:
        self.busy -= 1

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to count
        loop.call_soon_threadsafe(callback)
