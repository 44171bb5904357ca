"""client/batching.py: batch entries, their triggers and determinism; interop with the official
consumer and the broker's dedup through real SENDs."""

from __future__ import annotations

import pulsar
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.batching import (
    BatchBuilder,
    BuiltEntry,
    OutgoingMessage,
    _record_header,
    encode_message,
)
from protocol import commands, compression, pb
from protocol.batch import decode_batch
from protocol.enums import CompressionType
from protocol.framing import FrameDecoder
from protocol.metadata import decode_entry
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession, T


def _messages(count: int, first_sequence_id: int = 0) -> list[OutgoingMessage]:
    """Messages with every per-message field set differently."""
    return [
        OutgoingMessage(
            payload=f"payload-{i}".encode() * (i % 3 + 1),
            sequence_id=first_sequence_id + i,
            properties={"i": str(i), "parity": "odd" if i % 2 else "even"} if i % 4 else {},
            partition_key=f"key-{i % 3}" if i % 5 else None,
            ordering_key=bytes([i % 256]) * 2 if i % 2 else None,
            event_time=1_700_000_000_000 + i if i % 3 else 0,
            null_value=i == 7,
        )
        for i in range(count)
    ]


def _batch(messages: list[OutgoingMessage], **build: object) -> BuiltEntry:
    builder = BatchBuilder(max_messages=len(messages), max_bytes=1 << 30)
    for message in messages:
        assert builder.add(message, now=1_000)
    return builder.build(producer_name="p", **build)  # type: ignore[arg-type]


def _decoded(built: BuiltEntry) -> tuple[pb.MessageMetadata, list[OutgoingMessage]]:
    metadata, payload = decode_entry(built.entry)
    if metadata.compression:
        payload = compression.decode(metadata.compression, payload, metadata.uncompressed_size)
    singles = decode_batch(payload, metadata.num_messages_in_batch)
    return metadata, [
        OutgoingMessage(
            payload=s.payload,
            sequence_id=s.sequence_id if s.sequence_id is not None else -1,
            properties=dict(s.properties),
            partition_key=s.partition_key,
            ordering_key=s.ordering_key,
            event_time=s.event_time,
            null_value=s.null_value,
        )
        for s in singles
    ]


# --------------------------------------------------------------------------- one batch


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_a_batch_holds_every_message_field_and_its_dedup_identity(codec: CompressionType) -> None:
    messages = _messages(10, first_sequence_id=40)
    built = _batch(messages, codec=codec, schema_version=b"\x00" * 7 + b"\x02")
    metadata, decoded = _decoded(built)
    assert decoded == [m._replace(properties=dict(m.properties)) for m in messages]
    assert (built.sequence_id, built.highest_sequence_id, built.num_messages) == (40, 49, 10)
    assert built.is_batch
    assert metadata.num_messages_in_batch == 10
    assert metadata.sequence_id == 40
    assert metadata.highest_sequence_id == 49
    assert metadata.publish_time == 1_000  # the first add's time
    assert metadata.producer_name == "p"
    assert metadata.schema_version == b"\x00" * 7 + b"\x02"
    assert metadata.compression == codec
    if codec == CompressionType.NONE:
        assert not metadata.HasField("uncompressed_size")  # as the C++ client writes it
    else:
        assert metadata.uncompressed_size == built.uncompressed_size
    # The batch takes the first message's keys (the C++ client's initBatchMessageMetadata).
    assert not metadata.HasField("partition_key")
    assert not metadata.HasField("ordering_key")
    keyed = _batch(_messages(3)[1:])
    assert decode_entry(keyed.entry)[0].partition_key == "key-1"
    assert decode_entry(keyed.entry)[0].ordering_key == b"\x01\x01"


def test_the_send_carries_num_messages_and_the_highest_sequence_id() -> None:
    built = _batch(_messages(5, first_sequence_id=7))
    decoder = FrameDecoder()
    decoder.feed(built.send(producer_id=3))
    (frame,) = list(decoder)
    send = frame.command.send
    assert (send.producer_id, send.sequence_id, send.num_messages) == (3, 7, 5)
    assert send.highest_sequence_id == 11
    assert frame.entry == built.entry
    assert frame.checksum_valid
    assert frame.has_checksum


def test_a_message_alone_is_a_plain_entry() -> None:
    message = _messages(10)[9]._replace(deliver_at_time=1_234)
    built = encode_message(message, producer_name="p", publish_time=99, codec=CompressionType.ZSTD)
    metadata, payload = decode_entry(built.entry)
    assert not metadata.HasField("num_messages_in_batch")
    assert not built.is_batch
    assert built.num_messages == 1
    assert (metadata.sequence_id, metadata.publish_time, metadata.deliver_at_time) == (9, 99, 1234)
    assert {kv.key: kv.value for kv in metadata.properties} == message.properties
    assert metadata.partition_key == message.partition_key
    assert metadata.ordering_key == message.ordering_key
    assert metadata.event_time == message.event_time
    assert compression.decode(metadata.compression, payload, len(message.payload)) == (
        message.payload
    )
    decoder = FrameDecoder()
    decoder.feed(built.send(1))
    assert not next(iter(decoder)).command.send.HasField("num_messages")


@settings(max_examples=80, deadline=None)
@given(
    payload=st.binary(max_size=50),
    sequence_id=st.integers(0, 2**63 - 1),
    properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    partition_key=st.none() | st.text(max_size=8),
    ordering_key=st.none() | st.binary(max_size=8),
    event_time=st.integers(0, 2**63 - 1),
    null_value=st.booleans(),
)
def test_record_header_equals_the_protocol_encoding(
    payload: bytes,
    sequence_id: int,
    properties: dict[str, str],
    partition_key: str | None,
    ordering_key: bytes | None,
    event_time: int,
    null_value: bool,
) -> None:
    message = OutgoingMessage(
        payload, sequence_id, properties, partition_key, ordering_key, event_time, None, null_value
    )
    assert _record_header(message) == message.to_single().to_pb().SerializeToString()


# --------------------------------------------------------------------------- triggers


def test_count_trigger() -> None:
    builder = BatchBuilder(max_messages=3, max_bytes=1 << 20)
    for message in _messages(3):
        assert not builder.is_full
        assert builder.add(message, now=0)
    assert builder.is_full
    assert len(builder) == 3
    assert not builder.add(_messages(4)[3], now=0)  # refused: build first
    assert builder.build(producer_name="p").num_messages == 3
    assert len(builder) == 0
    assert not builder.is_full


def test_size_trigger_and_a_message_larger_than_the_limit_goes_alone() -> None:
    builder = BatchBuilder(max_messages=100, max_bytes=100)
    small = OutgoingMessage(b"s" * 30, 1)
    assert builder.add(small, now=0)
    assert builder.size == 4 + len(_record_header(small)) + 30
    big = OutgoingMessage(b"B" * 500, 2)
    assert not builder.add(big, now=0)  # would exceed: the batch is built without it
    assert builder.build(producer_name="p").num_messages == 1
    assert builder.add(big, now=0)  # an empty batch takes anything
    assert builder.is_full
    alone = builder.build(producer_name="p")
    assert (alone.num_messages, alone.sequence_id, alone.highest_sequence_id) == (1, 2, 2)


def test_delay_trigger_uses_the_callers_clock() -> None:
    builder = BatchBuilder(max_publish_delay_ms=10)
    assert builder.deadline is None
    assert not builder.is_due(10**12)
    builder.add(OutgoingMessage(b"a", 1), now=5_000)
    builder.add(OutgoingMessage(b"b", 2), now=5_008)
    assert builder.deadline == 5_010
    assert not builder.is_due(5_009)
    assert builder.is_due(5_010)
    builder.build(producer_name="p")
    assert builder.deadline is None


def test_refusals() -> None:
    builder = BatchBuilder()
    with pytest.raises(ValueError, match="empty"):
        builder.build(producer_name="p")
    with pytest.raises(ValueError, match="deliver_at_time"):
        builder.add(OutgoingMessage(b"later", 1, deliver_at_time=5), now=0)
    builder.add(OutgoingMessage(b"a", 5), now=0)
    for stale in (5, 4):
        with pytest.raises(ValueError, match="does not follow 5"):
            builder.add(OutgoingMessage(b"b", stale), now=0)
    assert len(builder) == 1
    with pytest.raises(ValueError, match="positive"):
        BatchBuilder(max_messages=0)


def _accumulate(messages: list[OutgoingMessage], **limits: int) -> list[bytes]:
    """The producer's loop: add, build when refused or full; flush at the end."""
    builder = BatchBuilder(**limits)
    entries: list[bytes] = []
    for now, message in enumerate(messages):
        if not builder.add(message, now):
            entries.append(builder.build(producer_name="p", codec=CompressionType.LZ4).entry)
            assert builder.add(message, now)
        if builder.is_full:
            entries.append(builder.build(producer_name="p", codec=CompressionType.LZ4).entry)
    if len(builder):
        entries.append(builder.build(producer_name="p", codec=CompressionType.LZ4).entry)
    return entries


def test_batches_are_a_pure_function_of_their_input() -> None:
    messages = _messages(500)
    first = _accumulate(messages, max_messages=37, max_bytes=2_000)
    second = _accumulate(list(messages), max_messages=37, max_bytes=2_000)
    assert first == second  # byte-identical entries, so identical boundaries
    counts = [decode_entry(entry)[0].num_messages_in_batch for entry in first]
    assert sum(counts) == 500
    assert max(counts) <= 37
    assert len(counts) > 500 // 37


# --------------------------------------------------------------------------- interop


@pytest.mark.integration
@pytest.mark.compat
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=lambda c: c.name)
def test_official_consumer_reads_our_batches_and_dedup_sees_the_highest_id(
    broker: BrokerThread, codec: CompressionType
) -> None:
    topic = f"persistent://public/default/batches-{codec.name}"
    messages = _messages(25, first_sequence_id=100)
    builder = BatchBuilder(max_messages=10)
    entries = []
    for now, message in enumerate(messages):
        assert builder.add(message, 1_700_000_000_000 + now)
        if builder.is_full or message is messages[-1]:
            entries.append(builder.build(producer_name="batcher", codec=codec))
    assert [e.num_messages for e in entries] == [10, 10, 5]
    client = new_client(broker.url)
    try:
        consumer = client.subscribe(
            topic, "official", initial_position=pulsar.InitialPosition.Earliest
        )
        with RawSession(broker.port) as session:
            created = session.request(commands.producer(topic, 1, 1, producer_name="batcher"), 1)
            assert created.type == T.PRODUCER_SUCCESS
            for entry in entries:
                session.send(entry.send(1))
            receipts = [session.take(lambda f: f.type == T.SEND_RECEIPT) for _ in entries]
            # Resent once stored: the broker's dedup answers -1:-1 and stores nothing.
            session.send(entries[1].send(1))
            receipts.append(session.take(lambda f: f.type in (T.SEND_RECEIPT, T.SEND_ERROR)))
        ids = [r.command.send_receipt.message_id for r in receipts]
        assert [(i.ledgerId, i.entryId) for i in ids[3:]] == [(2**64 - 1, 2**64 - 1)]
        assert [i.entryId for i in ids[:3]] == [0, 1, 2]
        assert [r.command.send_receipt.sequence_id for r in receipts] == [100, 110, 120, 110]

        received = [consumer.receive(5000) for _ in messages]
        for index, (got, sent) in enumerate(zip(received, messages, strict=True)):
            assert got.data() == sent.payload
            assert got.properties() == dict(sent.properties)
            assert got.partition_key() == (sent.partition_key or "")
            assert got.ordering_key() == (sent.ordering_key.decode() if sent.ordering_key else "")
            assert got.event_timestamp() == sent.event_time
            assert got.has_null_value() == sent.null_value
            assert got.producer_name() == "batcher"
            batch = index // 10
            assert got.publish_timestamp() == 1_700_000_000_000 + batch * 10
            assert (got.message_id().entry_id(), got.message_id().batch_index()) == (
                batch,
                index % 10,
            )
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)  # the duplicate was not stored

        # An official producer of the same name resumes after our highest sequence id.
        producer = client.create_producer(topic, producer_name="batcher")
        assert producer.last_sequence_id() == 124
    finally:
        close_client(client)
