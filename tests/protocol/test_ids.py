"""protocol.ids: MessageId ordering, sentinels, wire conversion and serialization."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import pb
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.ids import I64_MAX, MessageId, from_u64, to_u64

U64_MINUS_ONE = 2**64 - 1


def test_sentinels() -> None:
    assert MessageId.earliest == MessageId(-1, -1, -1, -1)
    assert MessageId.latest == MessageId(I64_MAX, I64_MAX, -1, -1)
    assert MessageId.earliest < MessageId(0, 0) < MessageId.latest


def test_ordering_uses_ledger_entry_batch_index_signed() -> None:
    ordered = [
        MessageId(-1, -1),
        MessageId(0, 0),
        MessageId(0, 0, batch_index=0),
        MessageId(0, 0, batch_index=5),
        MessageId(0, 1),
        MessageId(1, -1),
        MessageId(1, 0),
    ]
    rotated = ordered[3:] + ordered[:3]
    assert sorted(rotated) == ordered


def test_partition_excluded_from_order_but_included_in_equality() -> None:
    a = MessageId(1, 2, partition=0)
    b = MessageId(1, 2, partition=1)
    assert a != b
    assert not a < b
    assert not b < a
    assert a <= b
    assert a >= b
    assert len({a, b}) == 2


def test_comparison_with_other_types() -> None:
    as_tuple: object = (1, 2, -1, -1)
    assert MessageId(1, 2) != as_tuple
    with pytest.raises(TypeError):
        _ = MessageId(1, 2) < as_tuple


def test_frozen() -> None:
    message_id = MessageId(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        message_id.ledger_id = 3  # type: ignore[misc]
    assert not hasattr(message_id, "__dict__")


def test_out_of_range_rejected() -> None:
    with pytest.raises(LocalProtocolError):
        MessageId(2**63, 0)


def test_u64_conversion() -> None:
    assert to_u64(-1) == U64_MINUS_ONE
    assert from_u64(U64_MINUS_ONE) == -1
    assert to_u64(I64_MAX) == I64_MAX
    assert from_u64(I64_MAX) == I64_MAX
    assert from_u64(2**63) == -(2**63)


def test_to_pb_leaves_defaults_out() -> None:
    data = MessageId(3, 4).to_pb()
    assert (data.ledgerId, data.entryId) == (3, 4)
    assert not data.HasField("partition")
    assert not data.HasField("batch_index")
    full = MessageId(3, 4, 2, 1).to_pb()
    assert (full.partition, full.batch_index) == (2, 1)


def test_earliest_to_pb_uses_uint64_minus_one() -> None:
    data = MessageId.earliest.to_pb()
    assert data.ledgerId == U64_MINUS_ONE
    assert data.entryId == U64_MINUS_ONE


def test_from_pb_reads_defaults_as_minus_one() -> None:
    data = pb.MessageIdData(ledgerId=U64_MINUS_ONE, entryId=5)
    assert MessageId.from_pb(data) == MessageId(-1, 5, -1, -1)


def test_serialize_is_a_message_id_data() -> None:
    raw = MessageId(7, 9, 1, 3).serialize()
    parsed = pb.MessageIdData.FromString(raw)
    assert (parsed.ledgerId, parsed.entryId, parsed.partition, parsed.batch_index) == (7, 9, 1, 3)


def test_serialize_matches_java_layout_for_earliest() -> None:
    # Java writes ledgerId/entryId -1 as 10-byte varints; protobuf uint64 2**64-1 is the same.
    assert (
        MessageId.earliest.serialize()
        == b"\x08" + b"\xff" * 9 + b"\x01\x10" + b"\xff" * 9 + b"\x01"
    )


def test_deserialize_ignores_extra_fields_like_batch_size() -> None:
    data = pb.MessageIdData(ledgerId=1, entryId=2, batch_index=0, batch_size=10)
    assert MessageId.deserialize(data.SerializeToString()) == MessageId(1, 2, -1, 0)


@pytest.mark.parametrize("raw", [b"", b"\x08\x01", b"\xff\xff\xff"])
def test_deserialize_rejects_incomplete(raw: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        MessageId.deserialize(raw)


signed64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
small = st.integers(min_value=-1, max_value=2**31 - 1)


@settings(max_examples=100, deadline=None)
@given(signed64, signed64, small, small)
def test_serialize_round_trip(ledger: int, entry: int, partition: int, batch: int) -> None:
    message_id = MessageId(ledger, entry, partition, batch)
    assert MessageId.deserialize(message_id.serialize()) == message_id
    assert MessageId.from_pb(message_id.to_pb()) == message_id
