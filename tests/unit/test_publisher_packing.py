"""The relay packs its XADDs by hand: byte for byte what hiredis would send."""

from __future__ import annotations

import hiredis
from hypothesis import given
from hypothesis import strategies as st

from sluice.relay.publisher import _chunks, head, pack
from sluice.store import StoredEvent

texts = st.text(min_size=0, max_size=40)


@given(
    stream=st.binary(min_size=1, max_size=30),
    seq=st.integers(min_value=1, max_value=2**62),
    event_id=texts,
    type_=texts,
    trace_id=texts,
    payload=st.binary(max_size=300),
)
def test_a_packed_xadd_is_what_hiredis_packs(
    stream: bytes, seq: int, event_id: str, type_: str, trace_id: str, payload: bytes
) -> None:
    event = StoredEvent(
        seq=seq,
        event_id=event_id,
        type=type_,
        aggregate="a",
        payload=payload,
        trace_id=trace_id,
        created_at="",
    )
    expected = hiredis.pack_command(
        (
            b"XADD",
            stream,
            b"*",
            b"event_id",
            event_id,
            b"seq",
            seq,
            b"type",
            type_,  # type: ignore[arg-type]
            b"trace_id",
            trace_id,
            b"data",
            payload,
        )
    )
    assert pack(head(stream), event) == expected


def test_chunks_hold_every_command_once_in_order() -> None:
    h = head(b"s")
    events = [
        StoredEvent(
            seq=i,
            event_id=f"e{i}",
            type="T",
            aggregate="a",
            payload=b"{}",
            trace_id="",
            created_at="",
        )
        for i in range(1, 151)
    ]
    chunks = list(_chunks([(h, e) for e in events], size=64))
    assert len(chunks) == 3
    assert b"".join(chunks) == b"".join(pack(h, e) for e in events)
    reader = hiredis.Reader()
    reader.feed(b"".join(chunks))
    # Each command parses back as one array whose seq field is the event's.
    seqs = []
    while (command := reader.gets()) is not False:
        seqs.append(int(command[6]))
    assert seqs == list(range(1, 151))
