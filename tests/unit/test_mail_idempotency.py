"""Idempotency keys on a real SQLite store: the four outcomes, leases, release, recording.

The clock is injected, so lease expiry is tested without waiting for it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sluice.app.assembly import open_store
from sluice.builtin.accounts.mail.idempotency import CouldNotCheck, Outcome, SendLog
from sluice.config import load_config
from sluice.store import Store

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await open_store(load_config({}, data_dir=tmp_path))
    try:
        yield opened
    finally:
        await opened.close()


async def rows(store: Store) -> list[tuple[Any, ...]]:
    return await store.fetchall("SELECT key, state, recipient FROM mail_sends ORDER BY key")


async def test_reserve_send_record_then_every_later_attempt_sees_sent(store: Store) -> None:
    log = SendLog(store)
    first = await log.reserve("welcome_u1", "a@example.org")
    assert first.outcome is Outcome.RESERVED
    assert not await log.is_sent("welcome_u1")
    await log.mark_sent(first)
    assert await log.is_sent("welcome_u1")
    again = await log.reserve("welcome_u1", "a@example.org")
    assert again.outcome is Outcome.ALREADY_SENT
    assert await rows(store) == [("welcome_u1", "sent", "a@example.org")]


async def test_a_live_reservation_of_another_holder_is_busy_until_its_lease_expires(
    store: Store,
) -> None:
    clock = Clock()
    log = SendLog(store, lease=timedelta(minutes=2), clock=clock)
    holder = await log.reserve("welcome_u1", "a@example.org")

    clock.now = T0 + timedelta(minutes=1, seconds=59)
    busy = await log.reserve("welcome_u1", "a@example.org")
    assert busy.outcome is Outcome.BUSY
    assert busy.lease_until == "2025-01-01T12:02:00.000000Z"

    clock.now = T0 + timedelta(minutes=2, seconds=1)  # the holder crashed: take over
    taker = await log.reserve("welcome_u1", "a@example.org")
    assert taker.outcome is Outcome.RESERVED
    assert taker.holder != holder.holder


async def test_a_release_lets_the_next_attempt_reserve_and_only_the_holder_releases(
    store: Store,
) -> None:
    log = SendLog(store)
    first = await log.reserve("welcome_u1", "a@example.org")
    stranger = await log.reserve("welcome_u1", "a@example.org")
    await log.release(stranger)  # not the holder: changes nothing
    assert (await log.reserve("welcome_u1", "a@example.org")).outcome is Outcome.BUSY
    await log.release(first)
    assert await rows(store) == []
    assert (await log.reserve("welcome_u1", "a@example.org")).outcome is Outcome.RESERVED


async def test_a_sent_mail_is_never_released(store: Store) -> None:
    log = SendLog(store)
    reservation = await log.reserve("welcome_u1", "a@example.org")
    await log.mark_sent(reservation)
    await log.release(reservation)
    assert await log.is_sent("welcome_u1")


async def test_sent_is_recorded_even_when_the_lease_was_taken_over(store: Store) -> None:
    clock = Clock()
    log = SendLog(store, lease=timedelta(seconds=30), clock=clock)
    slow = await log.reserve("welcome_u1", "a@example.org")
    clock.now = T0 + timedelta(seconds=31)
    taker = await log.reserve("welcome_u1", "a@example.org")
    assert taker.outcome is Outcome.RESERVED

    await log.mark_sent(slow)  # the server did accept the slow holder's mail
    assert await log.is_sent("welcome_u1")
    await log.mark_sent(taker)
    assert await rows(store) == [("welcome_u1", "sent", "a@example.org")]


class BrokenStore:
    """A store whose every call fails, as a locked or vanished database does."""

    def transaction(self) -> Any:
        raise sqlite3.OperationalError("database is locked")

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        raise sqlite3.OperationalError("database is locked")


async def test_a_database_error_is_could_not_check_never_sent_nor_reserved() -> None:
    log = SendLog(BrokenStore())  # type: ignore[arg-type]
    with pytest.raises(CouldNotCheck) as reserve_error:
        await log.reserve("welcome_u1", "a@example.org")
    with pytest.raises(CouldNotCheck):
        await log.is_sent("welcome_u1")
    assert not reserve_error.value.permanent
    assert "database is locked" in str(reserve_error.value)


class LostAnswer:
    """A store whose next transaction commits and then raises, as a COMMIT does whose
    answer was lost when the database crashed right after it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lose_next = False
        self.refuse_next = False  # the next transaction fails before it changes anything

    def transaction(self) -> Any:
        return self._transaction()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Any]:
        if self.refuse_next:
            self.refuse_next = False
            raise ConnectionRefusedError("the database is down")
        async with self.store.transaction() as tx:
            yield tx
        if self.lose_next:
            self.lose_next = False
            raise ConnectionResetError("connection lost after COMMIT")

    async def fetchone(self, sql: str, params: Any = ()) -> Any:
        return await self.store.fetchone(sql, params)


async def test_a_reserve_whose_commit_answer_was_lost_is_taken_back_at_once(store: Store) -> None:
    flaky = LostAnswer(store)
    log = SendLog(flaky)  # type: ignore[arg-type]
    flaky.lose_next = True
    with pytest.raises(CouldNotCheck):
        await log.reserve("welcome_u1", "a@example.org")
    assert await rows(store) == [("welcome_u1", "reserved", "a@example.org")]  # it committed

    again = await log.reserve("welcome_u1", "a@example.org")  # not BUSY for the whole lease
    assert again.outcome is Outcome.RESERVED
    other = await SendLog(store).reserve("welcome_u1", "a@example.org")
    assert other.outcome is Outcome.BUSY  # another process still waits for the lease
    await log.mark_sent(again)
    assert await rows(store) == [("welcome_u1", "sent", "a@example.org")]


async def test_a_release_that_failed_is_taken_back_by_the_next_reserve_only(store: Store) -> None:
    flaky = LostAnswer(store)
    log = SendLog(flaky)  # type: ignore[arg-type]
    first = await log.reserve("welcome_u1", "a@example.org")
    flaky.refuse_next = True  # the send failed and so did the release: the row stays
    await log.release(first)
    assert await rows(store) == [("welcome_u1", "reserved", "a@example.org")]

    second = await log.reserve("welcome_u1", "a@example.org")
    assert second.outcome is Outcome.RESERVED
    third = await log.reserve("welcome_u1", "a@example.org")  # the remembered holder is used once
    assert third.outcome is Outcome.BUSY
