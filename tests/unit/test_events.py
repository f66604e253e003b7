from __future__ import annotations

import uuid
from datetime import UTC, datetime

import msgspec
import pytest

from sluice.app.assembly import default_apps
from sluice.builtin.links.events import LinkCreated
from sluice.events import EVENT_TYPES, decode, encode, uuid7
from tests.engine_app import Pinged, registered

# sluice's and the built-in apps' types: not those of apps other tests of this process
# declared (their fields are not all strings).
BUILT_IN = {cls.__name__: cls for cls in default_apps().event_types}


def test_every_event_type_round_trips_through_the_codec() -> None:
    samples = {
        name: cls(**{f: "x" for f in cls.__struct_fields__ if _required(cls, f)})
        for name, cls in BUILT_IN.items()
        if not any(_needs_datetime(cls, f) for f in cls.__struct_fields__)
    }
    samples["LinkCreated"] = LinkCreated(
        code="abc123",
        owner_id="u1",
        url="https://e.org",
        expires_at=datetime(2030, 1, 1, tzinfo=UTC),
    )
    for event in samples.values():
        assert decode(encode(event)) == event


def _required(cls: type[msgspec.Struct], name: str) -> bool:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return any(f.name == name and f.required for f in info.fields)


def _needs_datetime(cls: type[msgspec.Struct], name: str) -> bool:
    return _required(cls, name) and cls.__annotations__.get(name) == "datetime"


def test_catalogue_names_every_spec_event() -> None:
    assert {
        "UserRegistered",
        "LinkCreated",
        "LinkUpdated",
        "LinkVisited",
        "ArticleViewed",
        "ReminderCreated",
        "ReminderDeleted",
        "ReminderDue",
        "ExportRequested",
        "TaskRunFinished",
    } <= set(EVENT_TYPES)


def test_unknown_fields_from_a_newer_producer_are_ignored() -> None:
    registered()  # the engine's test app (tests/engine_app)
    raw = (
        b'{"type":"Pinged","event_id":"e","occurred_at":"2026-01-01T00:00:00Z",'
        b'"source":"a","note":"v","added_in_v2":42}'
    )
    event = decode(raw)
    assert isinstance(event, Pinged)
    assert event.source == "a"


def test_malformed_data_is_refused() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode(b"{")
    with pytest.raises(msgspec.ValidationError):
        decode(b'{"type":"NoSuchEvent"}')


def test_uuid7_is_version_7_and_time_ordered() -> None:
    ids = [uuid7() for _ in range(1000)]
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert len(set(ids)) == 1000
    stamps = [uuid.UUID(i).int >> 80 for i in ids]
    assert stamps == sorted(stamps)
