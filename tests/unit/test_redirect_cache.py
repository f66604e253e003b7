"""The redirect path's link cache: LRU bound, brief negative entries, and no stale fill
when a change (forget) or a clear lands while a database read is in flight."""

from __future__ import annotations

import asyncio

import pytest

from sluice.builtin.links.cache import LinkCache, Target, apply_entry, location
from sluice.builtin.links.events import LinkUpdated
from sluice.events import encode


def target(url: str = "https://example.org/", disabled: bool = False) -> Target:
    return Target(url, None, disabled)


class FakeDb:
    """Answers reads from ``rows``; a read can be held open with ``gate``."""

    def __init__(self) -> None:
        self.rows: dict[str, Target] = {}
        self.reads: list[str] = []
        self.gate: asyncio.Event | None = None
        self.fail = False
        self.began = asyncio.Event()  # a read has begun

    async def load(self, code: str) -> Target | None:
        self.reads.append(code)
        self.began.set()
        row = self.rows.get(code)  # the snapshot of a read that began now
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("database is locked")
        return row


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_hits_do_not_read_and_the_lru_is_bounded() -> None:
    db = FakeDb()
    db.rows = {f"c{i}": target(f"https://example.org/{i}") for i in range(4)}
    cache = LinkCache(db.load, max_size=3)
    for code in ("c0", "c1", "c2", "c0", "c0"):
        await cache.get(code)
    assert db.reads == ["c0", "c1", "c2"]
    await cache.get("c3")  # evicts c1, the least recently used
    assert len(cache) == 3
    await cache.get("c0")
    await cache.get("c1")
    assert db.reads == ["c0", "c1", "c2", "c3", "c1"]


async def test_unknown_codes_are_cached_briefly_and_links_expire_after_max_age() -> None:
    db, clock = FakeDb(), Clock()
    cache = LinkCache(db.load, unknown_ttl=2.0, max_age=60.0, clock=clock)
    assert await cache.get("new") is None
    db.rows["new"] = target()
    assert await cache.get("new") is None  # still the cached "unknown"
    clock.now += 2.5
    assert await cache.get("new") == target()
    db.rows["new"] = target(disabled=True)
    clock.now += 59
    assert await cache.get("new") == target()
    clock.now += 2
    assert await cache.get("new") == target(disabled=True)


async def test_a_change_during_a_read_wins_over_the_read() -> None:
    db = FakeDb()
    db.rows["abc"] = target("https://old.example/")
    db.gate = asyncio.Event()
    cache = LinkCache(db.load)
    reading = asyncio.create_task(cache.get("abc"))
    await db.began.wait()
    # The change commits while that read is in flight; the row now holds the new state.
    db.rows["abc"] = target("https://new.example/")
    cache.forget("abc")
    # A request after the change does not join the read that began before it.
    after = asyncio.create_task(cache.get("abc"))
    await asyncio.sleep(0)
    db.gate.set()
    assert await reading == target("https://old.example/")  # that request saw the old state
    assert await after == target("https://new.example/")
    db.gate = None
    assert await cache.get("abc") == target("https://new.example/")  # cached, not the old
    assert db.reads == ["abc", "abc"]


async def test_a_forgotten_link_is_read_again_once_and_cached() -> None:
    db = FakeDb()
    db.rows["abc"] = target("https://old.example/")
    cache = LinkCache(db.load)
    assert await cache.get("abc") == target("https://old.example/")
    assert cache.cached("abc") == target("https://old.example/")
    db.rows["abc"] = target("https://new.example/")
    cache.forget("abc")
    with pytest.raises(KeyError):
        cache.cached("abc")  # the redirect's fast path does not answer a forgotten link
    assert await cache.get("abc") == target("https://new.example/")
    assert cache.cached("abc") == target("https://new.example/")
    assert db.reads == ["abc", "abc"]


async def test_while_the_database_fails_a_forgotten_link_answers_its_last_known_state() -> None:
    db = FakeDb()
    db.rows["abc"] = target("https://old.example/")
    cache = LinkCache(db.load)
    await cache.get("abc")
    db.fail = True
    cache.forget("abc")  # a hint: the state as it was answers
    assert await cache.get("abc") == target("https://old.example/")
    cache.forget("abc", target("https://new.example/"))  # a stream entry carries the state
    assert await cache.get("abc") == target("https://new.example/")
    cache.forget("never-read")  # nothing known: the failure is the answer
    with pytest.raises(OSError):
        await cache.get("never-read")


async def test_a_clear_during_a_read_keeps_the_read_out_of_the_cache() -> None:
    db = FakeDb()
    db.rows["abc"] = target()
    db.gate = asyncio.Event()
    cache = LinkCache(db.load)
    reading = asyncio.create_task(cache.get("abc"))
    await asyncio.sleep(0)
    cache.clear()
    db.gate.set()
    await reading
    assert len(cache) == 0


async def test_concurrent_misses_share_one_read() -> None:
    db = FakeDb()
    db.rows["abc"] = target()
    db.gate = asyncio.Event()
    cache = LinkCache(db.load)
    readers = [asyncio.create_task(cache.get("abc")) for _ in range(50)]
    await asyncio.sleep(0)
    readers[0].cancel()  # a client that went away does not cancel the others' read
    db.gate.set()
    results = await asyncio.gather(*readers[1:])
    assert results == [target()] * 49
    assert db.reads == ["abc"]


async def test_a_failed_read_serves_the_stale_entry_or_raises() -> None:
    db, clock = FakeDb(), Clock()
    db.rows["abc"] = target()
    cache = LinkCache(db.load, max_age=1.0, clock=clock)
    await cache.get("abc")
    clock.now += 5
    db.fail = True
    assert await cache.get("abc") == target()
    with pytest.raises(OSError):
        await cache.get("other")


async def test_a_links_stream_entry_forgets_the_link_and_keeps_its_state() -> None:
    db = FakeDb()
    db.rows["abc"] = target("https://old.example/")
    cache = LinkCache(db.load)
    await cache.get("abc")
    event = LinkUpdated(code="abc", owner_id="u", url="https://example.org/ä b", disabled=True)
    apply_entry(cache, {b"type": b"LinkUpdated", b"data": encode(event)})
    apply_entry(cache, {b"type": b"LinkUpdated", b"data": b"{not json"})  # skipped, logged
    apply_entry(cache, {b"type": b"Other"})
    assert len(cache) == 1
    with pytest.raises(KeyError):
        cache.cached("abc")
    # The state the entry carries, as a redirect's Location has it, if the database fails.
    db.fail = True
    assert await cache.get("abc") == Target("https://example.org/%C3%A4%20b", None, True)


def test_location_encodes_only_what_a_header_cannot_carry() -> None:
    assert location("https://example.org/%7Ea?q=1") == "https://example.org/%7Ea?q=1"
    assert location("https://exämple.org/ä b") == "https://xn--exmple-cua.org/%C3%A4%20b"
    assert "\n" not in location("https://example.org/a\r\nSet-Cookie: x=1")


async def test_a_read_begun_before_a_forget_never_fills_even_if_the_entry_was_evicted() -> None:
    rows = {"x": target("https://old.example/"), "y": target(), "z": target()}
    gate, began = asyncio.Event(), asyncio.Event()

    async def load(code: str) -> Target | None:
        row = rows.get(code)  # the snapshot of a read that began now
        if code == "x" and not gate.is_set():
            began.set()
            await gate.wait()
        return row

    clock = Clock()
    cache = LinkCache(load, max_size=2, max_age=60, clock=clock)
    gate.set()
    await cache.get("x")
    await cache.get("y")  # x is now the least recently used
    clock.now += 61  # both expired
    gate.clear()
    old_read = asyncio.create_task(cache.get("x"))
    await began.wait()
    rows["x"] = target("https://new.example/")
    cache.forget("x")
    await cache.get("z")  # evicts the least recently used entry: y, not the forgotten x
    after = asyncio.create_task(cache.get("x"))  # must not join the read begun before
    await asyncio.sleep(0)
    gate.set()
    assert await old_read == target("https://old.example/")
    assert await after == target("https://new.example/")
    assert cache.cached("x") == target("https://new.example/")


async def test_a_link_read_again_is_the_most_recently_used() -> None:
    db, clock = FakeDb(), Clock()
    db.rows = {code: target(f"https://example.org/{code}") for code in "abc"}
    cache = LinkCache(db.load, max_size=2, max_age=10, clock=clock)
    await cache.get("a")
    clock.now += 5
    await cache.get("b")
    clock.now += 6  # a expired, b fresh
    await cache.get("a")  # read again: now the most recent
    await cache.get("c")  # evicts b, the least recently used
    assert await cache.get("a") == target("https://example.org/a")
    assert db.reads == ["a", "b", "a", "c"]


async def test_a_code_cached_as_unknown_then_forgotten_is_not_a_404_while_the_db_fails() -> None:
    db = FakeDb()
    cache = LinkCache(db.load)
    assert await cache.get("new1") is None  # cached as unknown
    cache.forget("new1")  # it was just created (a hint)
    db.fail = True
    with pytest.raises(OSError):  # 503, not a 404 for a link that exists
        await cache.get("new1")
