"""``client.message``: the official accessor names and values."""

from __future__ import annotations

import pulsar
import pytest

from client.message import Message, ReceivedEntry
from client.message_id import MessageId
from protocol import SingleMessage, pb
from protocol.ids import MessageId as WireMessageId

pytestmark = pytest.mark.compat

TOPIC = "persistent://public/default/t"


def test_every_official_accessor_exists() -> None:
    official = {
        name
        for name in dir(pulsar.Message)
        if not name.startswith("_") and name != "encryption_context"
    }
    missing = official - set(dir(Message))
    assert not missing


def test_a_whole_entry_message() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=42, publish_time=1000, event_time=900
    )
    metadata.properties.add(key="a", value="b")
    metadata.partition_key = "k"
    metadata.ordering_key = b"o"
    message = Message.from_entry(TOPIC, MessageId(-1, 1, 2), metadata, b"data", redelivery_count=3)
    assert message.data() == message.value() == b"data"
    assert message.properties() == {"a": "b"}
    assert (message.partition_key(), message.ordering_key()) == ("k", "o")
    assert (message.event_timestamp(), message.publish_timestamp()) == (900, 1000)
    assert (message.producer_name(), message.sequence_id()) == ("p", 42)
    assert message.redelivery_count() == 3
    assert message.topic_name() == TOPIC
    assert message.message_id() == MessageId(-1, 1, 2)
    assert not message.has_null_value()


def test_absent_fields_read_as_the_official_client_returns_them() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5)
    message = Message.from_entry(TOPIC, MessageId(-1, 1, 2), metadata, b"")
    assert (message.partition_key(), message.ordering_key(), message.event_timestamp()) == (
        "",
        "",
        0,
    )
    assert message.properties() == {}


def test_a_batch_member_takes_its_own_fields_and_sequence_id() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=10, publish_time=5, num_messages_in_batch=3
    )
    single = SingleMessage(b"x", {"i": "1"}, partition_key="k1", event_time=7, sequence_id=11)
    message = Message.from_batch(TOPIC, MessageId(-1, 1, 2, 1), metadata, single.to_pb(), b"x")
    assert (message.data(), message.properties(), message.partition_key()) == (
        b"x",
        {"i": "1"},
        "k1",
    )
    assert (message.sequence_id(), message.event_timestamp()) == (11, 7)
    unnumbered = SingleMessage(b"y").to_pb()
    member = Message.from_batch(TOPIC, MessageId(-1, 1, 2, 2), metadata, unnumbered, b"y")
    assert member.sequence_id() == 12
    assert (member.properties(), member.partition_key(), member.event_timestamp()) == ({}, "", 0)


def test_value_decodes_with_the_schema() -> None:
    class Upper:
        def decode(self, data: bytes) -> str:
            return data.decode().upper()

    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5)
    message = Message(b"abc", MessageId(-1, 1, 2), TOPIC, metadata, schema=Upper())
    assert message.value() == "ABC"
    assert message.data() == b"abc"


def test_a_message_whose_metadata_came_as_bytes_parses_it_on_first_use() -> None:
    """The consumer keeps a plain message's metadata serialized until it is read."""
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=42, publish_time=1000, event_time=900
    )
    metadata.properties.add(key="a", value="b")
    metadata.partition_key = "k"
    entry = ReceivedEntry(TOPIC, metadata.SerializeToString(), 1, 2, 0, -1)
    message = Message.of_whole_entry(entry, b"data")
    assert message.message_id() == MessageId(-1, 1, 2)  # the id needs no metadata
    assert type(entry._metadata) is bytes
    assert message.properties() == {"a": "b"}
    assert (message.partition_key(), message.event_timestamp()) == ("k", 900)
    assert (message.producer_name(), message.sequence_id()) == ("p", 42)
    assert entry.metadata is entry.metadata == metadata  # parsed once, then kept


def test_ack_position_tells_a_whole_entry_a_batch_member_and_a_chunked_message_apart() -> None:
    """What an acknowledgement reads, in one call (``Acknowledger.acknowledge_queued``): size 0
    for a whole entry, with or without its id made; index and size for one of a batch; size
    -1 for a message reassembled from chunks (its id knows the chunks to acknowledge)."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=5)
    whole = Message.of_whole_entry(ReceivedEntry(TOPIC, metadata, 1, 2, 0, -1, cluster="c"), b"x")
    assert whole.ack_position() == ((1, 2), -1, 0, "c")
    assert whole.message_id() == MessageId(-1, 1, 2)
    assert whole.ack_position() == ((1, 2), -1, 0, "c")
    batched = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=5, num_messages_in_batch=3
    )
    single = SingleMessage(b"x").to_pb()
    member = Message.from_batch(TOPIC, MessageId(-1, 1, 2, 1, batch_size=3), batched, single, b"x")
    assert member.ack_position()[:3] == ((1, 2), 1, 3)
    chunked_id = MessageId.from_wire(WireMessageId(1, 2), first_chunk=WireMessageId(1, 0))
    chunked = Message(b"x", chunked_id, TOPIC, metadata)
    assert chunked.is_chunked()
    assert chunked.ack_position()[:3] == ((1, 2), -1, -1)
