"""The code pool on a real SQLite store: refill, taking codes, the background refiller."""

from __future__ import annotations

import asyncio
import re

import pytest
import structlog

from sluice.app.assembly import open_store
from sluice.app.testing import wait_for
from sluice.builtin.links.pool import (
    ALPHABET,
    CODE_LENGTH,
    PoolRefiller,
    RandomBytes,
    free_codes,
    low_mark,
    new_codes,
    refill,
    take_code,
)
from sluice.config import Config
from sluice.store import Store

CODE = re.compile(r"[0-9A-Za-z]{6}")


async def pool(store: Store) -> list[tuple[str, int]]:
    return [(str(c), int(t)) for c, t in await store.fetchall("SELECT code, taken FROM code_pool")]


async def test_refill_tops_up_to_the_target_exactly_and_is_idempotent(store: Store) -> None:
    assert await refill(store, 2500) == 2500
    assert await free_codes(store) == 2500
    assert await refill(store, 2500) == 0
    codes = await pool(store)
    assert len(codes) == 2500
    assert all(CODE.fullmatch(code) and len(code) == CODE_LENGTH for code, _ in codes)
    assert {c for code, _ in codes for c in code} == set(ALPHABET)


async def test_refill_counts_only_free_codes_and_works_in_batches(store: Store) -> None:
    assert await refill(store, 50, batch=7) == 50
    async with store.transaction() as tx:
        taken = [await take_code(tx) for _ in range(20)]
    assert len(set(taken)) == 20 and None not in taken
    assert await free_codes(store) == 30
    assert await refill(store, 50, batch=7) == 20
    assert await free_codes(store) == 50
    assert len(await pool(store)) == 70
    assert await refill(store, 10) == 0  # above the target: nothing added, nothing removed


async def test_concurrent_refills_stop_at_the_target(store: Store, config: Config) -> None:
    other = await open_store(config)  # a second process's connection
    try:
        added = await asyncio.gather(
            refill(store, 3000, batch=500), refill(other, 3000, batch=500), refill(store, 3000)
        )
    finally:
        await other.close()
    assert sum(added) == 3000
    assert await free_codes(store) == 3000


async def test_taking_codes_hands_each_out_once_then_reports_empty(store: Store) -> None:
    await refill(store, 5)

    async def take_one() -> str | None:
        async with store.transaction() as tx:
            return await take_code(tx)

    results = await asyncio.gather(*(take_one() for _ in range(8)))
    codes = [code for code in results if code is not None]
    assert len(codes) == len(set(codes)) == 5
    assert results.count(None) == 3
    assert sorted(codes) == sorted(code for code, taken in await pool(store) if taken)


async def test_codes_are_handed_out_in_random_order_not_sorted(store: Store) -> None:
    await refill(store, 1000)
    async with store.transaction() as tx:
        taken = [await take_code(tx) for _ in range(50)]
    codes = [code for code in taken if code is not None]
    assert len(set(codes)) == 50
    # Sorted hand-out would let the holder of two links enumerate the codes between them.
    assert codes != sorted(codes)
    assert len({code[0] for code in codes}) > 10


async def test_a_rolled_back_link_gives_its_code_back(store: Store) -> None:
    await refill(store, 1)
    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            assert await take_code(tx) is not None
            raise RuntimeError("the link insert failed")
    assert await free_codes(store) == 1


def test_the_low_mark_is_a_tenth_at_least_100_never_above_the_target() -> None:
    assert low_mark(100_000) == 10_000
    assert low_mark(300) == 100
    assert low_mark(50) == 50
    assert low_mark(0) == 0
    assert low_mark(-5) == 0


async def test_the_refiller_refills_once_in_the_background_when_low(store: Store) -> None:
    refiller = PoolRefiller(store, 400, interval=3600)
    refiller.poke()
    refiller.poke()  # already running: no second refill
    assert refiller.running
    await refiller.wait()
    assert await free_codes(store) == 400
    async with store.transaction() as tx:
        await tx.execute("UPDATE code_pool SET taken = 1")
    refiller.poke()  # checked within the interval: waits for its next turn...
    assert not refiller.running
    refiller.poke(empty=True)  # ...unless a link found the pool empty
    await refiller.wait()
    assert await free_codes(store) == 400


async def test_the_refiller_leaves_a_pool_above_its_low_mark_alone(store: Store) -> None:
    await refill(store, 150)  # the low mark of 1000 is 100
    refiller = PoolRefiller(store, 1000)
    refiller.poke()
    await refiller.wait()
    assert await free_codes(store) == 150


async def test_a_failed_refill_is_logged_not_raised(config: Config) -> None:
    broken = await open_store(config)
    await broken.close()
    refiller = PoolRefiller(broken, 100)
    with structlog.testing.capture_logs() as logs:
        refiller.poke(empty=True)
        await refiller.wait()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["code pool refill failed"]
    assert not refiller.running


async def test_closing_stops_a_running_refill(store: Store) -> None:
    refiller = PoolRefiller(store, 200_000)
    refiller.poke(empty=True)

    async def started() -> bool:
        return await free_codes(store) > 0

    await wait_for(started, interval=0.005)
    await refiller.close()
    assert not refiller.running
    stopped_at = await free_codes(store)
    assert 0 < stopped_at < 200_000
    assert stopped_at % 1000 == 0  # whole batches only: the interrupted one rolled back


def test_codes_have_the_right_shape_and_use_every_character() -> None:
    codes = new_codes(5000)
    assert len(codes) == len(set(codes)) == 5000
    assert all(len(code) == CODE_LENGTH and set(code) <= set(ALPHABET) for code in codes)
    counts = {c: 0 for c in ALPHABET}
    for code in codes:
        for c in code:
            counts[c] += 1
    # 30000 draws, 484 expected per character; a biased map would skew the low ones.
    assert min(counts.values()) > 350
    assert max(counts.values()) < 620


def cycling_bytes() -> RandomBytes:
    """A fake random source that returns 0, 1, ..., 255, 0, 1, ... across calls."""
    position = 0

    def read(n: int) -> bytes:
        nonlocal position
        chunk = bytes((position + i) % 256 for i in range(n))
        position += n
        return chunk

    return read


def test_the_generator_rejects_the_bytes_that_would_bias_it() -> None:
    """Every byte value equally often in, every character exactly equally often out: bytes
    248..255, which ``% 62`` would map onto the first 8 characters again, are thrown away."""
    drawn = "".join(new_codes(124, randbytes=cycling_bytes()))  # 744 = 3 x 248 characters
    assert {drawn.count(c) for c in ALPHABET} == {12}
    assert drawn[:248] == "".join(ALPHABET[b % 62] for b in range(248))


def test_rejected_bytes_never_reach_a_code() -> None:
    def biased_source(n: int) -> bytes:
        return bytes([255, 250, 248, 0, 61, 62]) * (n // 6 + 1)

    [code] = new_codes(1, randbytes=biased_source)
    assert code == "0z0" * 2  # 0 -> '0', 61 -> 'z', 62 -> '0'; 248..255 skipped
