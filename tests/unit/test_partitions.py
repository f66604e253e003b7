"""Partitions: an aggregate's events all in one stream, partitions spread over the
cluster's slot ranges, release 1's key names kept for one partition."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from redis.crc import key_slot

from sluice.builtin.accounts.events import UserRegistered
from sluice.builtin.links.events import LinkVisited
from sluice.builtin.reminders.events import ReminderDue
from sluice.config import load_config
from sluice.errors import ConfigError
from sluice.events import encode
from sluice.streams.engine_keys import Keys
from sluice.streams.partitions import partition_of, payload_partition
from tests.engine_app import Pinged, registered

registered()  # the engine's test app (tests/engine_app): its events encode


def test_an_aggregate_always_maps_to_the_partition_of_its_id() -> None:
    events = [
        ("visits", LinkVisited(code="promo", visitor="v1"), "promo"),
        ("pings", Pinged(source="a7"), "a7"),
        ("users", UserRegistered(user_id="u1", email="a@example.org"), "u1"),
    ]
    for aggregate, event, key in events:
        expected = partition_of(key, 16)
        assert payload_partition(aggregate, encode(event), 16) == expected


def test_many_aggregates_spread_over_the_partitions() -> None:
    counts = Counter(partition_of(f"code-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8))
    assert min(counts.values()) > 800  # ~1000 each


def test_one_untagged_partition_keeps_release_one_names() -> None:
    keys = Keys("sluice")
    assert keys.stream("articles") == "sluice:articles"
    assert keys.retry("mail") == "sluice:retry:mail"
    assert keys.dead("mail") == "sluice:dead:mail"
    assert keys.delayed("mail") == "sluice:delayed:mail"
    assert payload_partition("reminders", b"not even json", 1) == 0


@pytest.mark.parametrize("partitions", [1, 3, 16, 100])
def test_a_partitions_keys_share_one_slot_in_its_share_of_the_slots(partitions: int) -> None:
    keys = Keys("sluice", partitions, tagged=True)
    for p in keys.numbers:
        names = [keys.stream(a, p) for a in ("articles", "visits")]
        names += [keys.retry("mail", p), keys.dead("mail", p), keys.delayed("mail", p)]
        slots = {key_slot(n.encode()) for n in names}
        assert len(slots) == 1
        slot = slots.pop()
        assert p * 16384 // partitions <= slot < (p + 1) * 16384 // partitions


def test_reminder_due_routes_by_its_reminder() -> None:
    when = datetime(2026, 12, 2, 9, tzinfo=UTC)
    due = ReminderDue(reminder_id="r9", owner_id="u", scheduled_for=when, text="t")
    assert payload_partition("reminders", encode(due), 5) == partition_of("r9", 5)


def test_partition_and_cluster_settings_are_checked() -> None:
    assert load_config({}).partitions == 1
    cluster = load_config({"SLUICE_REDIS_CLUSTER_NODES": "10.0.0.1:7000, [::1]:7001"})
    assert cluster.partitions == 16
    assert cluster.cluster_seeds == [("10.0.0.1", 7000), ("::1", 7001)]
    assert load_config({"SLUICE_STREAM_PARTITIONS": "4"}).partitions == 4
    for bad in (
        {"SLUICE_STREAM_PARTITIONS": "-1"},
        {"SLUICE_STREAM_PARTITIONS": "5000"},
        {"SLUICE_REDIS_CLUSTER_NODES": "nohost"},
        {"SLUICE_REDIS_CLUSTER_NODES": "h:99999"},
    ):
        with pytest.raises(ConfigError):
            load_config(bad)
