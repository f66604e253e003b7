"""Archive segments: rows come back byte for byte, or the segment is refused.

Round trips on realistic events of every type (split into columns, none kept
as bytes), on anything hypothesis draws for the events table's columns, and on
payloads the columns cannot hold; every single-byte change and every
truncation of a segment refused as corrupt; an intact segment of an unknown
version refused as such; the header read without the body.
"""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice import history
from sluice.app.assembly import default_apps
from sluice.builtin.accounts.events import UserRegistered, UserVerified, VerificationRequested
from sluice.builtin.articles.events import ArticleViewed
from sluice.builtin.links.events import (
    ExportRequested,
    ImportRequested,
    LinkCreated,
    LinkUpdated,
    LinkVisited,
)
from sluice.builtin.reminders.events import (
    ReminderCreated,
    ReminderDeleted,
    ReminderDue,
    ReminderUpdated,
)
from sluice.events import EVENT_TYPES, Event, JobDue, TaskRunFinished, encode, type_name, uuid7
from sluice.history import (
    CorruptSegment,
    EventRow,
    SegmentInfo,
    UnsupportedSegmentVersion,
    frame,
    layout,
)

FAST = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DEFAULT_TYPES = default_apps().event_types  # sluice's and its built-in apps', not the tests' own
rng = random.Random(7)


def _hex(bits: int) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def realistic_events() -> list[Event]:
    """One or more events of every type, as sluice's code builds them."""
    user, owner, at = uuid7(), uuid7(), START
    return [
        UserRegistered(user_id=user, email="ana@example.org", name="Ana Lúcia", trace_id=_hex(128)),
        VerificationRequested(user_id=user, email="ana@example.org", trace_id=_hex(128)),
        UserVerified(user_id=user, email="ana@example.org", trace_id=_hex(128), occurred_at=at),
        LinkCreated(
            code="aZ3kP9",
            owner_id=owner,
            url="https://example.org/a?b=c&d=é#x",
            expires_at=at + timedelta(days=30),
            trace_id=_hex(128),
        ),
        LinkCreated(
            code="launch",
            owner_id=owner,
            url="https://example.org/l",
            max_visits=100,
            valid_since=at,
            redirect_status=308,
            tags=("news", "q3"),
            title="Launch",
            trace_id=_hex(128),
        ),
        LinkUpdated(
            code="aZ3kP9",
            owner_id=owner,
            url="https://example.org/b",
            disabled=True,
            trace_id=_hex(128),
        ),
        *(
            LinkVisited(
                code=rng.choice(("aZ3kP9", "Qw12Er")),
                visitor=_hex(256),
                referrer_host=rng.choice((None, "t.co", "news.ycombinator.com")),
                browser=rng.choice(("Chrome", "Mobile Safari", "Googlebot")),
                is_bot=rng.random() < 0.1,
                trace_id=_hex(128),
                occurred_at=at + timedelta(microseconds=rng.randrange(10**7)),
            )
            for _ in range(40)
        ),
        ArticleViewed(article_id="how-we-archive", viewer=_hex(256), trace_id=_hex(128)),
        ArticleViewed(article_id="how-we-archive", viewer=user, trace_id=_hex(128)),
        ReminderCreated(
            reminder_id=uuid7(),
            owner_id=owner,
            cron="0 30 9 * * MON-FRI",
            timezone="Europe/Paris",
            text='Stand-up, "daily"\nroom 2',
        ),
        ReminderUpdated(
            reminder_id=uuid7(),
            owner_id=owner,
            cron="0 0 8 * * *",
            timezone="America/New_York",
            text="Water the plants 🌱",
            paused=True,
        ),
        ReminderDue(
            reminder_id=uuid7(),
            owner_id=owner,
            scheduled_for=at.replace(microsecond=0),
            text="Water the plants 🌱",
            email="ana@example.org",
            name=None,
        ),
        ReminderDeleted(reminder_id=uuid7(), owner_id=owner),
        ExportRequested(job_id=uuid7(), owner_id=owner, code="aZ3kP9", trace_id=_hex(128)),
        ImportRequested(job_id=uuid7(), owner_id=owner, trace_id=_hex(128)),
        TaskRunFinished(
            run_id=uuid7(),
            task="purge-tokens",
            trigger="cron",
            status="failed",
            scheduled_for=at,
            error="Traceback (most recent call last):\n\t...",
        ),
        TaskRunFinished(run_id=uuid7(), task="purge-tokens", trigger="manual", status="succeeded"),
        JobDue(
            job="close-order",
            key=uuid7(),
            scheduled_for=at + timedelta(minutes=15),
            payload=msgspec.Raw(b'{"order_id":"o-1","note":"caf\xc3\xa9 \\"x\\""}'),
            trace_id=_hex(128),
        ),
        JobDue(job="close-order", key=uuid7(), scheduled_for=at, trace_id=_hex(128)),
    ]


def rows_of(events: list[Event], first_seq: int = 1) -> list[EventRow]:
    """The events table's rows for ``events``, committed in batches of up to five."""
    rows = []
    for i, e in enumerate(events):
        created_at = (START + timedelta(milliseconds=5 * (i // 5))).isoformat()  # as stores do
        rows.append(
            (
                first_seq + i,
                e.event_id,
                type_name(e),
                e.aggregate,
                encode(e),
                e.trace_id,
                created_at,
            )
        )
    return rows


def test_realistic_events_of_every_type_come_back_exactly_and_split_into_columns() -> None:
    events = realistic_events()
    assert {type_name(e) for e in events} == {t.__name__ for t in DEFAULT_TYPES}, (
        "add the new type here"
    )
    rows = rows_of(events, first_seq=1_000)
    segment = history.encode(rows)
    assert history.decode(segment) == rows
    assert history.read_info(segment).raw_payloads == 0


def test_every_aggregate_alone_comes_back_exactly() -> None:
    rows = rows_of(realistic_events())
    for aggregate in {row[3] for row in rows}:
        mine = [row for row in rows if row[3] == aggregate]
        assert history.decode(history.encode(mine)) == mine


def test_visits_take_under_64_bytes_each() -> None:
    """The budget of issue 21, on a small realistic mix: 20,000 visits of 4,000 visitors."""
    visitors = [_hex(256) for _ in range(4_000)]
    codes = [f"c{i:05d}" for i in range(500)]
    at, events = START, []
    for _ in range(20_000):
        at += timedelta(microseconds=rng.randrange(2_000))
        events.append(
            LinkVisited(
                code=rng.choice(codes),
                visitor=rng.choice(visitors),
                occurred_at=at,
                referrer_host=rng.choice((None, None, "t.co", "www.google.com")),
                browser=rng.choice(("Chrome", "Firefox", "Mobile Safari")),
                trace_id=_hex(128),
            )
        )
    rows = rows_of(events)
    segment = history.encode(rows)
    assert history.decode(segment) == rows
    assert len(segment) / len(rows) < 64


# --- anything the events table can hold ---------------------------------------------


def _event_values(kind: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    if isinstance(kind, msgspec.inspect.UnionType):
        return st.one_of(*(_event_values(member) for member in kind.types))
    if isinstance(kind, msgspec.inspect.VarTupleType):  # LinkCreated.tags
        return st.lists(_event_values(kind.item_type), max_size=4).map(tuple)
    if isinstance(kind, msgspec.inspect.StructType):  # LinkCreated.rules: Rule, When
        return st.builds(kind.cls, **{f.name: _event_values(f.type) for f in kind.fields})
    if isinstance(kind, msgspec.inspect.LiteralType):  # When.device, When.os
        return st.sampled_from(kind.values)
    if isinstance(kind, msgspec.inspect.RawType):  # JobDue.payload: any JSON document
        return st.deferred(lambda: json_values).map(lambda v: msgspec.Raw(msgspec.json.encode(v)))
    return {
        msgspec.inspect.StrType: st.text(),
        msgspec.inspect.BoolType: st.booleans(),
        msgspec.inspect.IntType: st.integers(-(2**63), 2**63 - 1),
        msgspec.inspect.DateTimeType: st.datetimes(timezones=st.just(UTC)),
        msgspec.inspect.NoneType: st.none(),
    }[type(kind)]


def _events(cls: type[Event]) -> st.SearchStrategy[Event]:
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return st.builds(cls, **{f.name: _event_values(f.type) for f in info.fields})


any_event = st.one_of(*(_events(cls) for cls in EVENT_TYPES.values()))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
odd_json = st.one_of(
    st.dictionaries(st.text(max_size=5), json_values, max_size=4).map(json.dumps),  # spaces
    st.dictionaries(st.text(max_size=5), json_values, max_size=4).map(
        lambda d: msgspec.json.encode(d).decode()
    ),
    json_values.map(lambda v: json.dumps(v, ensure_ascii=True, separators=(",", ":"))),
).map(str.encode)
hex_of = st.integers(0, 2**128 - 1).map(lambda v: f"{v:032x}")
times = st.datetimes(timezones=st.sampled_from([UTC, None, datetime.now().astimezone().tzinfo]))
texts = st.one_of(st.text(), st.sampled_from(["", "Z", "+00:00", "2026-03-02T09:00:00Z"]))
rows_strategy = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.one_of(st.uuids().map(str), st.builds(uuid7), texts, hex_of),
        st.one_of(st.sampled_from(sorted(EVENT_TYPES)), texts),
        st.one_of(st.sampled_from(["visits", "links", "users"]), texts),
        st.one_of(st.binary(), odd_json, any_event.map(encode)),
        st.one_of(hex_of, st.just(""), texts, st.uuids().map(str)),
        st.one_of(times.map(datetime.isoformat), texts),
    ),
    min_size=1,
    max_size=20,
)


@FAST
@given(rows_strategy)
def test_any_rows_come_back_exactly(rows: list[EventRow]) -> None:
    assert history.decode(history.encode(rows)) == rows


@FAST
@given(st.lists(any_event, min_size=1, max_size=10), st.sampled_from(["", "row"]))
def test_every_payload_sluice_writes_is_split_into_columns(events: list[Event], ids: str) -> None:
    """Whatever its fields hold, an event's payload is rebuilt from its columns, never
    kept as bytes. ``ids``: the row's ids are the event's own, or others entirely."""
    rows = rows_of(events)
    if not ids:
        rows = [(s, uuid7(), t, a, p, _hex(128), c) for s, _, t, a, p, _, c in rows]
    segment = history.encode(rows)
    assert history.decode(segment) == rows
    assert history.read_info(segment).raw_payloads == 0


@pytest.mark.parametrize(
    "created_at",
    [
        "2026-03-02T09:00:00+00:00",  # a whole second: isoformat() writes no fraction
        "2026-03-02T09:00:00.000001+00:00",
        "0001-01-01T00:00:00+00:00",
        "9999-12-31T23:59:59.999999+00:00",
        "2026-03-02T09:00:00.000000+00:00",  # not how isoformat() writes it: kept as text
        "2026-03-02T10:00:00.5+01:00",
        "2026-03-02T09:00:00",
        "2026-03-02 09:00:00+00:00",
        "2026-03-02T09:00:00.123456Z",
        "\uff12\uff10\uff12\uff16-03-02T09:00:00+00:00",  # fullwidth digits
        "2026-03-02T09:00:00.\uff11\uff12\uff13\uff14\uff15\uff16+00:00",
    ],
)
def test_times_come_back_in_their_own_spelling(created_at: str) -> None:
    visit = LinkVisited(code="a", visitor=_hex(256))
    payload = encode(visit).replace(
        msgspec.json.encode(visit.occurred_at)[1:-1], created_at.encode()
    )
    rows = [(1, visit.event_id, "LinkVisited", "visits", payload, "", created_at)]
    assert history.decode(history.encode(rows)) == rows


def test_payloads_the_columns_cannot_rebuild_are_kept_as_bytes() -> None:
    visit = encode(LinkVisited(code="a", visitor=_hex(256)))
    odd = [
        visit.replace(b'"code":"a"', b'"code": "a"'),  # whitespace
        visit.replace(b'"code":"a"', b'"code":"\\u0061"'),  # an escape msgspec does not write
        visit.replace(b'"v":1', b'"v":1.50'),  # a float msgspec writes 1.5
        visit.replace(b'"v":1', b'"v":1,"v":2'),  # a key twice
        b"[1,2]",
        b"\xff\x00 not json",
        b"",
    ]
    payloads = [visit, *odd, visit]
    rows = [
        (i, uuid7(), "LinkVisited", "visits", p, "", START.isoformat())
        for i, p in enumerate(payloads)
    ]
    segment = history.encode(rows)
    assert history.decode(segment) == rows
    assert history.read_info(segment).raw_payloads == len(odd)


def test_seqs_at_both_ends_of_int64_come_back() -> None:
    row = rows_of(realistic_events()[:1])[0]
    rows = [(seq, *row[1:]) for seq in (2**63 - 1, -(2**63), 0, 2**63 - 1)]
    assert history.decode(history.encode(rows)) == rows


def test_rows_the_table_cannot_hold_are_refused() -> None:
    row = rows_of(realistic_events()[:1])[0]
    with pytest.raises(ValueError, match="at least one"):
        history.encode([])
    with pytest.raises(TypeError, match="seq"):
        history.encode([(2**63, *row[1:])])
    with pytest.raises(TypeError, match="payload"):
        history.encode([(*row[:4], "text", *row[5:])])  # type: ignore[list-item]


# --- the header -------------------------------------------------------------------


def test_the_header_alone_gives_what_an_index_needs() -> None:
    rows = rows_of(realistic_events(), first_seq=500)
    rows[3], rows[7] = rows[7], rows[3]  # seq order is not required
    latest = (*rows[10][:6], "2027-01-01T00:00:00+00:00")
    rows[10] = latest
    segment = history.encode(rows)
    prefix = segment[: frame.info_size(segment[: frame.PREFIX_SIZE])]
    assert len(prefix) < 600
    info = history.read_info(prefix)
    assert info == SegmentInfo(
        count=len(rows),
        first_seq=500,
        last_seq=500 + len(rows) - 1,
        first_created_at=START.isoformat(),
        last_created_at="2027-01-01T00:00:00+00:00",
        types={
            t.__name__: sum(r[2] == t.__name__ for r in rows) for t in default_apps().event_types
        },
        aggregates=sorted({r[3] for r in rows}),
        raw_payloads=0,
        size=len(segment),
    )


def test_the_header_is_read_without_the_body() -> None:
    segment = bytearray(history.encode(rows_of(realistic_events())))
    segment[-40] ^= 0xFF  # inside the body
    assert history.read_info(bytes(segment)).count == len(realistic_events())
    with pytest.raises(CorruptSegment, match="digest"):
        history.decode(bytes(segment))


# --- damage -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_segment() -> bytes:
    events = realistic_events()
    return history.encode(rows_of(events[:3] + events[5:8] + events[-4:]))


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_single_byte_change_is_refused(small_segment: bytes, mask: int) -> None:
    for i in range(len(small_segment)):
        damaged = bytearray(small_segment)
        damaged[i] ^= mask
        with pytest.raises(CorruptSegment):
            history.decode(bytes(damaged))


def test_every_truncation_and_extension_is_refused(small_segment: bytes) -> None:
    for size in range(len(small_segment)):
        with pytest.raises(CorruptSegment):
            history.decode(small_segment[:size])
    with pytest.raises(CorruptSegment, match="header says"):
        history.decode(small_segment + b"\x00")


@pytest.mark.parametrize(
    ("offset", "message"),
    [(0, "magic"), (4, "header checksum"), (12, "header checksum"), (-1, "digest")],
)
def test_the_error_names_the_check_that_failed(
    small_segment: bytes, offset: int, message: str
) -> None:
    damaged = bytearray(small_segment)
    damaged[offset] ^= 0x01
    with pytest.raises(CorruptSegment, match=message):
        history.decode(bytes(damaged))


def _resealed(segment: bytes, version: int) -> bytes:
    """``segment`` with another version byte and both checksums made right again, as a
    newer writer would produce it (the layout of ``sluice.history.frame``)."""
    data = bytearray(segment[:-16])
    data[4] = version
    header_end = 9 + int.from_bytes(data[5:9], "little")
    data[header_end : header_end + 4] = zlib.crc32(data[:header_end]).to_bytes(4, "little")
    return bytes(data) + hashlib.blake2b(data, digest_size=16).digest()


def test_an_unknown_version_is_refused_clearly(small_segment: bytes) -> None:
    assert history.decode(_resealed(small_segment, 1)) == history.decode(small_segment)
    newer = _resealed(small_segment, 2)
    with pytest.raises(UnsupportedSegmentVersion, match="version 2 is not supported") as info:
        history.decode(newer)
    assert not isinstance(info.value, CorruptSegment)
    with pytest.raises(UnsupportedSegmentVersion):
        history.read_info(newer)


def test_columns_that_disagree_with_their_checksummed_header_are_refused() -> None:
    """A writer's bug, not damage: every checksum holds, the rows would be wrong."""
    rows = rows_of(realistic_events())
    header, columns = frame.open_body(history.encode(rows))
    body = msgspec.msgpack.decode(columns, type=layout.Body)
    other = msgspec.msgpack.decode(
        frame.open_body(history.encode([(seq + 1, *rest) for seq, *rest in rows]))[1],
        type=layout.Body,
    )
    shifted = msgspec.structs.replace(body, seq=other.seq)
    with pytest.raises(CorruptSegment, match="header"):
        history.decode(frame.seal(header, msgspec.msgpack.encode(shifted)))
    fields = body.payloads.layouts[0].fields
    broken = msgspec.structs.replace(fields[0], kinds=bytes([9]) * len(fields[0].kinds))
    shapes = [msgspec.structs.replace(body.payloads.layouts[0], fields=[broken, *fields[1:]])]
    payloads = msgspec.structs.replace(body.payloads, layouts=shapes + body.payloads.layouts[1:])
    bad_kind = msgspec.structs.replace(body, payloads=payloads)
    with pytest.raises(CorruptSegment, match="unknown kind 9"):
        history.decode(frame.seal(header, msgspec.msgpack.encode(bad_kind)))
