"""``py_batch_columns`` (the reference): the same facts as ``split_batch`` and ``Message``'s
accessors give per record, as columns; the same errors on malformed payloads."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.message import Message, ReceivedEntry
from protocol import pb
from protocol.batch import SingleMessage, encode_batch, split_batch
from protocol.batch_columns import BatchColumns, batch_columns, py_batch_columns
from protocol.errors import RemoteProtocolError

records = st.builds(
    SingleMessage,
    payload=st.binary(max_size=40),
    properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    partition_key=st.one_of(st.none(), st.text(max_size=6)),
    event_time=st.one_of(st.just(0), st.integers(0, (1 << 64) - 1)),
    sequence_id=st.one_of(st.none(), st.integers(0, (1 << 64) - 1)),
    null_value=st.booleans(),
)


def _signed(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _as_messages(payload: bytes, count: int, first: int) -> list[Message]:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=first, publish_time=1, num_messages_in_batch=count
    )
    entry = ReceivedEntry("t", metadata, 1, 2, count, -1)
    return [
        Message.of_record(entry, index, single, data)
        for index, (single, data) in enumerate(split_batch(payload, count))
    ]


@given(st.lists(records, min_size=1, max_size=8), st.integers(0, (1 << 64) - 1))
def test_columns_hold_what_the_messages_say(batch: list[SingleMessage], first: int) -> None:
    payload = encode_batch(batch)
    columns = py_batch_columns(payload, len(batch), first)
    messages = _as_messages(payload, len(batch), first)
    offsets = array("i", columns.value_offsets)
    assert columns.count == len(messages)
    assert len(offsets) == len(messages) + 1
    values = [columns.values[offsets[i] : offsets[i + 1]] for i in range(len(messages))]
    assert values == [m.data() for m in messages]
    assert list(array("q", columns.sequence_ids)) == [_signed(m.sequence_id()) for m in messages]
    events = [_signed(m.event_timestamp()) for m in messages]
    assert (list(array("q", columns.event_times)) if columns.event_times else None) == (
        events if any(events) else None
    )
    keys = [m.partition_key().encode() or None for m in messages]
    assert columns.keys == (keys if any(keys) else None)
    props = [list(m.properties().items()) or None for m in messages]
    assert columns.properties == (props if any(props) else None)
    nulls = bytes(m.has_null_value() for m in messages)
    assert columns.null_values == (nulls if any(nulls) else None)


def test_nothing_present_gives_no_optional_columns() -> None:
    payload = encode_batch([SingleMessage(b"a"), SingleMessage(b"bc")])
    columns = batch_columns(payload, 2, 7)
    assert columns == BatchColumns(
        count=2,
        value_offsets=array("i", [0, 1, 3]).tobytes(),
        values=b"abc",
        sequence_ids=array("q", [7, 8]).tobytes(),
        event_times=None,
        keys=None,
        properties=None,
        null_values=None,
    )


@pytest.mark.parametrize("columns", [py_batch_columns, batch_columns])
@pytest.mark.parametrize(
    ("payload", "count"),
    [
        (encode_batch([SingleMessage(b"x")]), 2),  # fewer records than declared
        (encode_batch([SingleMessage(b"x")] * 3), 2),  # more
        (encode_batch([SingleMessage(b"xyz")])[:-1], 1),  # a truncated payload
        (b"\x00\x00\x00\x09\x18", 1),  # a truncated header
        (b"\x00\x00\x00\x02\x08\x01", 1),  # no payload size
    ],
)
def test_malformed_batches_raise_as_split_batch(
    columns: Callable[[bytes, int, int], BatchColumns], payload: bytes, count: int
) -> None:
    with pytest.raises(RemoteProtocolError) as expected:
        split_batch(payload, count)
    with pytest.raises(RemoteProtocolError) as raised:
        columns(payload, count, 0)
    assert str(raised.value) == str(expected.value)
