"""``client.message_id``: the official accessors and byte-compatible ``serialize()``."""

from __future__ import annotations

import pulsar
import pytest

from client.message_id import MessageId
from protocol.ids import MessageId as WireMessageId

pytestmark = pytest.mark.compat

IDS = [
    (-1, 0, 0, -1),
    (-1, 7, 11, -1),
    (3, 7, 11, 2),
    (-1, 1 << 40, 5, 0),
    (0, 2**63 - 1, 2**63 - 1, -1),
]


@pytest.mark.parametrize(("partition", "ledger", "entry", "batch"), IDS)
def test_serialize_equals_the_official_bytes(
    partition: int, ledger: int, entry: int, batch: int
) -> None:
    ours = MessageId(partition, ledger, entry, batch)
    official = pulsar.MessageId(partition, ledger, entry, batch)
    assert ours.serialize() == official.serialize()
    assert str(ours) == str(official)
    back = MessageId.deserialize(official.serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == (
        partition,
        ledger,
        entry,
        batch,
    )


def test_sentinels_serialize_like_the_official_ones() -> None:
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.earliest < MessageId(-1, 0, 0) < MessageId.latest


def test_batch_size_and_chunk_ids_round_trip_through_bytes() -> None:
    batched = MessageId.from_wire(WireMessageId(1, 0, -1, 2), batch_size=3)
    # What the official client serialized for message 2 of a 3-message batch at (1,0).
    assert batched.serialize() == bytes.fromhex("0801100020023003")
    assert MessageId.deserialize(batched.serialize()).batch_size() == 3
    chunked = MessageId.from_wire(WireMessageId(4, 9), first_chunk=WireMessageId(4, 7))
    back = MessageId.deserialize(chunked.serialize(), topic="persistent://public/default/t")
    assert back.first_chunk() == WireMessageId(4, 7)
    assert back == chunked
    assert back.topic_name() == "persistent://public/default/t"


def test_order_and_equality_follow_the_official_rules() -> None:
    assert MessageId(-1, 1, 2) < MessageId(-1, 1, 3) < MessageId(-1, 2, 0)
    assert MessageId(-1, 1, 2, 0) < MessageId(-1, 1, 2, 1)
    assert MessageId(-1, 1, 2) == MessageId(-1, 1, 2)
    assert MessageId(0, 1, 2) != MessageId(1, 1, 2)  # equality includes the partition
    assert len({MessageId(-1, 1, 2), MessageId(-1, 1, 2)}) == 1


@pytest.mark.parametrize("garbage", [b"", b"\x08", b"\xff\xff", b"\x10\x01"])
def test_deserialize_refuses_bytes_that_are_not_an_id(garbage: bytes) -> None:
    with pytest.raises(ValueError, match="not a serialized message id"):
        MessageId.deserialize(garbage)
