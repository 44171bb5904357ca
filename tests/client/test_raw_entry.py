"""``RawEntry``: which indexes are the reader's, and the id the receiver queue remembers."""

from __future__ import annotations

from client.message_id import MessageId
from client.raw_entry import RawEntry
from protocol import pb


def entry(count: int | None) -> RawEntry:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    if count is not None:
        metadata.num_messages_in_batch = count
    return RawEntry("persistent://public/default/t-partition-3", 5, 9, 3, metadata, b"")


def test_a_batch_from_its_start_index_and_ack_set() -> None:
    batch = entry(6)
    assert (batch.is_batch, batch.count, batch.taken()) == (True, 6, [0, 1, 2, 3, 4, 5])
    batch.first_index = 2
    batch.indexes = frozenset({0, 3, 4})
    assert batch.taken() == [3, 4]
    last = batch.message_id()
    assert last == MessageId.of_entry(5, 9, 4, 6, 3)
    assert (last.batch_index(), last.batch_size(), last.partition()) == (4, 6, 3)


def test_a_whole_entry_is_one_message() -> None:
    single = entry(None)
    assert (single.is_batch, single.count, single.taken()) == (False, 1, [0])
    assert single.message_id() == MessageId.of_entry(5, 9, -1, 0, 3)
    chunked = entry(None)
    chunked.chunked_id = MessageId(3, 5, 9, -1)
    assert chunked.message_id() is chunked.chunked_id
