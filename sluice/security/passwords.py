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

from sluice.errors import Overloaded, TooManyRequests

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
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=_MAXMEM,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


# Verified against when the email is unknown, so both failures cost the same time.
DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


class ClaimantBusy(TooManyRequests):
    """429: the claimant has as many hashes running or waiting as it may."""


def by_account(user_id: str) -> str:
    """The claimant of a hash an account asks for (its links' passwords, its own)."""
    return f"account {user_id}"


def by_address(address: str) -> str:
    """The claimant of a hash no account asks for (a login, a sign-up, unlocking a
    password link): the client address, as ``sluice.http.client_address`` reads it."""
    return f"address {address}"


class PasswordHasher:
    """Hashes and checks passwords in threads of its own, at most ``limit`` at once,
    shared fairly between claimants.

    A hash beyond the limit waits for a slot in a bounded queue: at most ``queue`` wait,
    each at most ``wait`` seconds, so a burst of sign-ups (ten at once, or fifty) is
    answered, only later. What is beyond the queue, or still waiting after ``wait``
    seconds, is refused (``Overloaded``: 503, ``Retry-After``): every hash costs the same
    CPU, so a longer queue (logins for random emails, thirty a second) would only make
    each login behind it wait longer, a real one for many seconds. A slot is taken until
    its thread finishes, also when the request that asked for it is gone, so no more than
    ``limit`` hashes ever run at once.

    Every hash is asked for by a *claimant* (an account, or a client address for what
    no account asks: logins, sign-ups, unlocking a password link). One claimant holds at
    most ``per_claimant`` hashes running or waiting; beyond that its hash is refused
    (``TooManyRequests``: 429, ``Retry-After``) and nobody else's, so one claimant's
    flood never fills the threads or the queue. A slot that frees goes to the claimants
    waiting in turn (round robin), each its oldest waiter: a claimant with one hash
    waiting waits for at most one hash of each other claimant waiting, however many
    hashes those have. ``per_claimant`` 0 sets no cap per claimant.
    """

    RETRY_AFTER = 1  # seconds: a hash takes tens of milliseconds

    def __init__(
        self, limit: int, queue: int = 0, wait: float = 0.0, per_claimant: int = 0
    ) -> None:
        self.limit = limit
        self.queue = queue
        self.wait = wait
        self.per_claimant = per_claimant
        self.busy = 0  # slots taken: hashes running, or handed to a waiter about to start
        self.held: dict[str, int] = {}  # per claimant: hashes running or waiting
        # Waiters per claimant; the dict's order is the claimants' turns.
        self._turns: dict[str, deque[asyncio.Future[None]]] = {}
        self._threads = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="password")

    @property
    def waiting(self) -> int:
        """Hashes in the queue for a slot."""
        return sum(map(len, self._turns.values()))  # at most ``queue``

    def admit(self, claimant: str) -> Claim:
        """One of ``claimant``'s places, held from now: 429 at once when it has all its
        places in hand, 503 when a hash asked for now would be refused. A request takes
        its place first, before anything else it does, so a refused one costs nothing
        (no Redis, no database) and requests sent at once are refused at once."""
        if self.per_claimant and self.held.get(claimant, 0) >= self.per_claimant:
            raise ClaimantBusy(
                f"{self.per_claimant} passwords of this account or client address are being"
                " checked already; try again in a moment",
                self.RETRY_AFTER,
            )
        if self.busy >= self.limit and self.waiting >= self.queue:
            raise self._full()
        self.held[claimant] = self.held.get(claimant, 0) + 1
        return Claim(self, claimant)

    async def hash(self, password: str, *, claimant: str) -> str:
        with self.admit(claimant) as claim:
            return await claim.hash(password)

    async def verify(self, password: str, stored: str, *, claimant: str) -> bool:
        with self.admit(claimant) as claim:
            return await claim.verify(password, stored)

    async def _run(self, claim: Claim, work: Callable[..., T], *args: str) -> T:
        loop = asyncio.get_running_loop()
        if self.busy < self.limit and not self._turns:
            self.busy += 1
        else:
            await self._slot(loop, claim.claimant)  # a slot handed over: ``busy`` counts it
        try:
            future = self._threads.submit(work, *args)
        except BaseException:  # shut down: the slot is not used
            self._pass_slot()
            raise
        claim.running = True  # its place is the thread's now, until the thread ends
        future.add_done_callback(lambda _: _call_soon(loop, self._release, claim.claimant))
        return await asyncio.wrap_future(future)

    async def _slot(self, loop: asyncio.AbstractEventLoop, claimant: str) -> None:
        """Wait for a slot in the queue; 503 when the queue is full or the wait too long."""
        if self.waiting >= self.queue:
            raise self._full()
        slot: asyncio.Future[None] = loop.create_future()
        self._turns.setdefault(claimant, deque()).append(slot)
        try:
            async with asyncio.timeout(self.wait):
                await slot
        except BaseException as exc:
            if slot.done() and not slot.cancelled():
                self._pass_slot()  # handed a slot just as the wait ended: pass it on
            else:
                slot.cancel()
                self._drop(claimant, slot)
            if isinstance(exc, TimeoutError):
                raise Overloaded(
                    "this server waited too long for a free password check; try again",
                    self.RETRY_AFTER,
                ) from None
            raise

    def _drop(self, claimant: str, slot: asyncio.Future[None]) -> None:
        waiters = self._turns.get(claimant)
        if waiters is None:
            return
        with contextlib.suppress(ValueError):  # a release may have dropped it
            waiters.remove(slot)
        if not waiters:
            del self._turns[claimant]

    def _full(self) -> Overloaded:
        return Overloaded(
            "this server is checking as many passwords as it can; try again in a moment",
            self.RETRY_AFTER,
        )

    def _unclaim(self, claimant: str) -> None:
        held = self.held[claimant] - 1
        if held:
            self.held[claimant] = held
        else:
            del self.held[claimant]

    def _release(self, claimant: str) -> None:
        """A hash's thread ended: its slot and its claimant's place are free."""
        self._unclaim(claimant)
        self._pass_slot()

    def _pass_slot(self) -> None:
        """A slot is free: the claimant whose turn it is takes it for its oldest waiter
        and goes to the end of the turns; with no one waiting, it is given back."""
        while self._turns:
            claimant = next(iter(self._turns))
            waiters = self._turns.pop(claimant)
            slot = waiters.popleft()
            if waiters:
                self._turns[claimant] = waiters  # to the end: the others go first
            if not slot.done():
                slot.set_result(None)
                return
        self.busy -= 1

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


class Claim:
    """One place of a claimant in the hasher (``PasswordHasher.admit``), for one hash. The
    place is held until the ``with`` block ends, or, once the hash runs, until its thread
    ends (a thread cannot be stopped, so its place stays taken while it runs)."""

    def __init__(self, hasher: PasswordHasher, claimant: str) -> None:
        self.hasher = hasher
        self.claimant = claimant
        self.running = False
        self._used = False

    async def hash(self, password: str) -> str:
        """``password``'s scrypt hash, computed in a thread once the claim's turn comes."""
        return await self._run(hash_password, password)

    async def verify(self, password: str, stored: str) -> bool:
        """Whether ``password`` matches the ``stored`` hash, checked in a thread once the
        claim's turn comes."""
        return await self._run(verify_password, password, stored)

    async def _run(self, work: Callable[..., T], *args: str) -> T:
        assert not self._used, "a claim is for one hash"
        self._used = True
        return await self.hasher._run(self, work, *args)

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *_: object) -> None:
        if not self.running:  # never hashed, or refused a slot: the place is free now
            self.running = True  # (closed: never given back twice)
            self.hasher._unclaim(self.claimant)


def _call_soon(
    loop: asyncio.AbstractEventLoop, callback: Callable[[str], None], claimant: str
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to count
        loop.call_soon_threadsafe(callback, claimant)
