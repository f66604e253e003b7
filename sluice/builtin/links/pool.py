"""The pool of pre-generated short codes.

Codes are 6 characters of base62 drawn from the operating system's CSPRNG by
rejection sampling, so every character is equally likely. The ``code_pool``
table holds them; a link takes one with a single conditional statement inside
its own transaction, so two creations can never get the same code.
"""

from __future__ import annotations

import asyncio
import secrets
import string
import time
from collections.abc import Callable

import structlog

from sluice.app import Store, Tx
from sluice.app.advanced import cancel_and_wait

log = structlog.get_logger(__name__)

ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase
CODE_LENGTH = 6
BATCH = 1000
# The largest multiple of 62 that fits a byte: bytes at or above it are
# rejected, so ``byte % 62`` is uniform over the alphabet.
_ACCEPT_BELOW = 256 - 256 % len(ALPHABET)

RandomBytes = Callable[[int], bytes]


def new_codes(count: int, randbytes: RandomBytes = secrets.token_bytes) -> list[str]:
    """``count`` random codes, without modulo bias (rejection sampling of random bytes)."""
    wanted = count * CODE_LENGTH
    chars: list[str] = []
    while len(chars) < wanted:
        # ~3% of bytes are rejected; ask for a little more than needed.
        missing = wanted - len(chars)
        for byte in randbytes(missing + missing // 16 + 8):
            if byte < _ACCEPT_BELOW:
                chars.append(ALPHABET[byte % len(ALPHABET)])
    del chars[wanted:]
    return ["".join(chars[i : i + CODE_LENGTH]) for i in range(0, wanted, CODE_LENGTH)]


def new_code() -> str:
    """One random code, for when the pool is empty."""
    return new_codes(1)[0]


def low_mark(target: int) -> int:
    """Below this many free codes a background refill starts: 10% of the target, at least 100
    (never above the target; a target of 0 turns the pool off)."""
    target = max(target, 0)
    return min(target, max(target // 10, 100))


async def free_codes(store: Store, *, at_most: int | None = None) -> int:
    """How many codes are free; with ``at_most``, counting stops there (a cheap low-mark check)."""
    if at_most is None:
        row = await store.fetchone("SELECT COUNT(*) FROM code_pool WHERE taken = 0")
    else:
        row = await store.fetchone(
            "SELECT COUNT(*) FROM (SELECT 1 FROM code_pool WHERE taken = 0 LIMIT ?) AS free",
            (at_most,),
        )
    return int(row[0]) if row else 0


async def take_code(tx: Tx) -> str | None:
    """Mark one free code taken and return it, in one statement; None when the pool is empty.

    It takes the first free code after a random point (wrapping around), not the smallest:
    handed out in sorted order, consecutive codes would share prefixes, and anyone holding
    two links could enumerate the links others created between them. Where writers run
    concurrently (PostgreSQL) a code another transaction is taking is skipped, not waited
    for (``SKIP LOCKED``); the outer ``taken = 0`` keeps the statement safe anyway.
    """
    skip = tx.dialect.row_lock("update", skip_locked=True)
    row = await tx.fetchone(
        "UPDATE code_pool SET taken = 1 WHERE taken = 0 AND code = COALESCE("
        f" (SELECT code FROM code_pool WHERE taken = 0 AND code >= ? ORDER BY code LIMIT 1{skip}),"
        f" (SELECT code FROM code_pool WHERE taken = 0 ORDER BY code LIMIT 1{skip})"
        ") RETURNING code",
        (new_code(),),
    )
    return None if row is None else str(row[0])


async def mark_taken(tx: Tx, code: str) -> None:
    """Record a code used outside the pool (generated on the spot, or an alias) as taken,
    so a later refill cannot offer it again."""
    await tx.execute(
        "INSERT INTO code_pool (code, taken) VALUES (?, 1)"
        " ON CONFLICT (code) DO UPDATE SET taken = 1",
        (code,),
    )


async def refill(store: Store, target: int, batch: int = BATCH) -> int:
    """Top the free codes up to ``target``; returns how many codes it added.

    Each batch of at most ``batch`` codes is its own short transaction (insert-or-ignore on
    the primary key), so link creation is never blocked for long. The free count is read
    inside each batch's transaction, so concurrent refills together stop at the target and
    a run interrupted by a crash simply continues from the pool's state next time (no
    cursor needed). Running it again adds nothing.

    A plain async function on purpose: the API calls it in the background when the pool
    falls under its low mark (``PoolRefiller``), and the scheduler's ``refill-code-pool``
    task (issue 5) is to call it as is, with ``SLUICE_CODE_POOL_TARGET``.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    added = 0
    while True:
        async with store.transaction() as tx:
            await tx.serialize("code-pool-refill")
            row = await tx.fetchone("SELECT COUNT(*) FROM code_pool WHERE taken = 0")
            missing = target - (int(row[0]) if row else 0)
            if missing <= 0:
                return added
            codes = new_codes(min(batch, missing))
            added += await tx.execute(
                "INSERT INTO code_pool (code) VALUES"
                f" {', '.join('(?)' for _ in codes)} ON CONFLICT (code) DO NOTHING",
                codes,
            )
        await asyncio.sleep(0)  # let waiting requests take the write lock between batches


class PoolRefiller:
    """Starts a background refill when the pool runs low; at most one at a time per process.

    ``poke`` never waits: the free count is checked in the background, at most once per
    ``interval`` seconds unless the pool was found empty. Failures are logged, never raised.
    """

    def __init__(self, store: Store, target: int, *, interval: float = 1.0) -> None:
        self._store = store
        self._target = target
        self._low = low_mark(target)
        self._interval = interval
        self._checked = -float("inf")
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def poke(self, *, empty: bool = False) -> None:
        """A code was taken (``empty``: none was left); refill in the background if low."""
        if self._low <= 0 or self.running:
            return
        now = time.monotonic()
        if not empty and now - self._checked < self._interval:
            return
        self._checked = now
        self._task = asyncio.create_task(self._run(), name="code-pool-refill")

    async def wait(self) -> None:
        """Wait for a running refill to end (tests, shutdown)."""
        if self._task is not None:
            await asyncio.wait([self._task])

    async def _run(self) -> None:
        try:
            if await free_codes(self._store, at_most=self._low) >= self._low:
                return
            added = await refill(self._store, self._target)
            log.info("code pool refilled", added=added, target=self._target)
        except Exception:
            log.exception("code pool refill failed")
        finally:
            self._checked = time.monotonic()

    async def close(self) -> None:
        """Stop a running refill; its current batch rolls back, committed ones stay."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
