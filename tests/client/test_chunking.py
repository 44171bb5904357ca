"""client/chunking.py: splitting into entries, reassembly rules (duplicates, gaps, bounds,
expiry), and interop both ways with the official client through a real broker."""

from __future__ import annotations

import os
import random

import pulsar
import pytest

from client.batching import OutgoingMessage, compress_payload, message_metadata
from client.chunking import (
    ChunkAssembler,
    ChunkedMessageId,
    ChunkingError,
    ChunkOutcome,
    chunk_uuid,
    is_chunk,
    split_into_chunks,
)
from protocol import commands, compression, pb
from protocol.enums import CompressionType, InitialPosition, SubType
from protocol.framing import FrameDecoder
from protocol.ids import MessageId
from protocol.metadata import decode_entry
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession, T

TWELVE_MIB = 12 * 1024 * 1024


def _metadata(sequence_id: int = 7, **fields: object) -> pb.MessageMetadata:
    message = OutgoingMessage(b"", sequence_id, properties={"app": "x"}, partition_key="k")
    metadata = message_metadata(message, producer_name="chunker", publish_time=1_000)
    for name, value in fields.items():
        setattr(metadata, name, value)
    return metadata


def _chunk_metadata(
    uuid: str, chunk_id: int, num_chunks: int, total: int, publish_time: int = 1_000
) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p",
        sequence_id=1,
        publish_time=publish_time,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
        total_chunk_msg_size=total,
    )


# --------------------------------------------------------------------------- producer side


def test_a_large_payload_becomes_chunks_within_the_size_limit() -> None:
    payload = os.urandom(10_000)
    metadata = _metadata(uncompressed_size=123_456)
    before = metadata.SerializeToString()
    chunks = split_into_chunks(metadata, payload, max_message_size=1_000)
    assert metadata.SerializeToString() == before  # the caller's metadata is untouched
    room = len(decode_entry(chunks[0].entry)[1])
    assert len(chunks) == -(-len(payload) // room)
    joined = b""
    for chunk_id, chunk in enumerate(chunks):
        assert len(chunk.entry) <= 1_000
        assert (chunk.chunk_id, chunk.num_chunks, chunk.sequence_id) == (chunk_id, len(chunks), 7)
        assert chunk.is_chunk
        assert chunk.is_last == (chunk_id == len(chunks) - 1)
        md, piece = decode_entry(chunk.entry)
        assert len(piece) == (room if not chunk.is_last else len(payload) % room or room)
        assert is_chunk(md)
        assert md.uuid == chunk_uuid("chunker", 7) == "chunker-7"
        assert (md.chunk_id, md.num_chunks_from_msg) == (chunk_id, len(chunks))
        assert md.total_chunk_msg_size == len(payload)
        assert md.sequence_id == 7
        assert md.uncompressed_size == 123_456
        assert md.partition_key == "k"
        assert [(kv.key, kv.value) for kv in md.properties] == [("app", "x")]
        joined += piece
    assert joined == payload


def test_the_send_of_a_chunk_is_flagged() -> None:
    chunks = split_into_chunks(_metadata(), b"x" * 3_000, max_message_size=1_000)
    decoder = FrameDecoder()
    decoder.feed(chunks[1].send(producer_id=4))
    send = next(iter(decoder)).command.send
    assert (send.producer_id, send.sequence_id, send.is_chunk) == (4, 7, True)
    assert not send.HasField("num_messages")


def test_a_message_that_fits_is_one_plain_entry() -> None:
    (only,) = split_into_chunks(_metadata(), b"small", max_message_size=1_000)
    assert (only.num_chunks, only.chunk_id, only.is_chunk, only.is_last) == (1, 0, False, True)
    md, payload = decode_entry(only.entry)
    assert payload == b"small"
    assert not md.HasField("uuid")
    assert not md.HasField("num_chunks_from_msg")
    decoder = FrameDecoder()
    decoder.feed(only.send(1))
    assert not next(iter(decoder)).command.send.is_chunk


def test_metadata_too_large_to_leave_room_for_payload() -> None:
    metadata = _metadata()
    metadata.properties.add(key="big", value="v" * 2_000)
    with pytest.raises(ChunkingError, match="no room"):
        split_into_chunks(metadata, b"x" * 10, max_message_size=1_000)


def test_chunked_message_id_serializes_as_the_official_clients_do() -> None:
    chunked = ChunkedMessageId(MessageId(3, 10), MessageId(3, 12))
    data = pb.MessageIdData.FromString(chunked.serialize())
    assert (data.ledgerId, data.entryId) == (3, 12)
    assert (data.first_chunk_message_id.ledgerId, data.first_chunk_message_id.entryId) == (3, 10)
    assert MessageId.deserialize(chunked.serialize()) == MessageId(3, 12)


# --------------------------------------------------------------------------- reassembly


def _feed(
    assembler: ChunkAssembler,
    uuid: str,
    chunk_ids: list[int],
    entry_ids: list[int] | None = None,
    now: int = 2_000,
    pieces: list[bytes] | None = None,
) -> list[ChunkOutcome]:
    pieces = pieces or [b"aa", b"bb", b"cc"]
    entry_ids = entry_ids or chunk_ids
    total = sum(len(p) for p in pieces)
    return [
        assembler.add(
            _chunk_metadata(uuid, chunk_id, len(pieces), total),
            pieces[chunk_id],
            MessageId(1, entry_id),
            now,
        )
        for chunk_id, entry_id in zip(chunk_ids, entry_ids, strict=True)
    ]


def test_chunks_in_order_make_a_message() -> None:
    assembler = ChunkAssembler()
    outcomes = _feed(assembler, "u", [0, 1, 2], [5, 6, 7])
    assert outcomes[:2] == [ChunkOutcome(), ChunkOutcome()]
    assert assembler.pending_count == 0
    message = outcomes[2].message
    assert message is not None
    assert message.payload == b"aabbcc"
    assert message.chunk_ids == (MessageId(1, 5), MessageId(1, 6), MessageId(1, 7))
    assert message.message_id == ChunkedMessageId(MessageId(1, 5), MessageId(1, 7))
    assert message.metadata.chunk_id == 2


def test_interleaved_messages_are_kept_apart() -> None:
    assembler = ChunkAssembler()
    a = _feed(assembler, "a", [0], [1])
    b = _feed(assembler, "b", [0, 1], [2, 3])
    rest = _feed(assembler, "a", [1, 2], [4, 5]) + _feed(assembler, "b", [2], [6])
    assert not any(o.message for o in a + b[:1])
    done = [o.message for o in rest if o.message is not None]
    assert [m.chunk_ids[0].entry_id for m in done] == [1, 2]
    assert all(m.payload == b"aabbcc" for m in done)


def test_duplicated_chunks_are_ignored_and_distinct_copies_acknowledged() -> None:
    assembler = ChunkAssembler()
    outcomes = _feed(assembler, "u", [0, 1, 1, 1, 0, 1, 2], [1, 2, 2, 9, 1, 2, 3])
    # 1:2 redelivered: ignored. 1:9 is a second stored copy of chunk 1: acknowledged.
    assert outcomes[2] == ChunkOutcome()
    assert outcomes[3] == ChunkOutcome(ack=(MessageId(1, 9),))
    # The first chunk redelivered (same entry) restarts the message, acknowledging nothing.
    assert outcomes[4] == ChunkOutcome()
    message = outcomes[6].message
    assert message is not None
    assert message.payload == b"aabbcc"
    assert message.chunk_ids == (MessageId(1, 1), MessageId(1, 2), MessageId(1, 3))


def test_a_resent_message_acknowledges_the_abandoned_attempt() -> None:
    assembler = ChunkAssembler()
    # Chunks 0-1 stored at 1:1-1:2, then the producer resent the whole message (1:3-1:5).
    outcomes = _feed(assembler, "u", [0, 1, 0, 1, 2], [1, 2, 3, 4, 5])
    assert outcomes[2] == ChunkOutcome(ack=(MessageId(1, 1), MessageId(1, 2)))
    message = outcomes[4].message
    assert message is not None
    assert message.chunk_ids == (MessageId(1, 3), MessageId(1, 4), MessageId(1, 5))


def test_a_gap_drops_the_message_for_redelivery_or_acks_it_once_expired() -> None:
    assembler = ChunkAssembler(expire_time_of_incomplete_chunked_message_ms=10_000)
    gap = _feed(assembler, "u", [0, 2], [1, 3], now=2_000)
    assert gap[1] == ChunkOutcome(redeliver=(MessageId(1, 1), MessageId(1, 3)))
    assert assembler.pending_count == 0
    # A chunk without its start: redelivered while young, acknowledged once older than the
    # expiry time (measured from its publish time), as the official clients decide.
    orphan = _feed(assembler, "v", [1], [4], now=2_000)
    assert orphan == [ChunkOutcome(redeliver=(MessageId(1, 4),))]
    stale = _feed(assembler, "w", [1], [5], now=11_001)
    assert stale == [ChunkOutcome(ack=(MessageId(1, 5),))]


def test_sizes_contradicting_the_header_drop_the_message() -> None:
    assembler = ChunkAssembler()
    too_much = [
        assembler.add(_chunk_metadata("u", i, 2, 3), b"xx", MessageId(1, i), 2_000)
        for i in range(2)
    ]
    assert too_much[1] == ChunkOutcome(redeliver=(MessageId(1, 0), MessageId(1, 1)))
    too_little = [
        assembler.add(_chunk_metadata("v", i, 2, 10), b"xx", MessageId(2, i), 2_000)
        for i in range(2)
    ]
    assert too_little[1] == ChunkOutcome(redeliver=(MessageId(2, 0), MessageId(2, 1)))
    huge = ChunkAssembler(max_chunked_message_size=100).add(
        _chunk_metadata("w", 0, 2, 101), b"x", MessageId(3, 0), 2_000
    )
    assert huge == ChunkOutcome(redeliver=(MessageId(3, 0),))
    with pytest.raises(ValueError, match="not a chunk"):
        assembler.add(_chunk_metadata("x", 0, 1, 1), b"x", MessageId(4, 0), 0)


@pytest.mark.parametrize("auto_ack", [False, True])
def test_pending_messages_are_bounded(auto_ack: bool) -> None:
    assembler = ChunkAssembler(
        max_pending_chunked_message=2, auto_ack_oldest_chunked_message_on_queue_full=auto_ack
    )
    _feed(assembler, "a", [0, 1], [1, 2])
    _feed(assembler, "b", [0], [3])
    (third,) = _feed(assembler, "c", [0], [4])
    evicted = (MessageId(1, 1), MessageId(1, 2))
    assert third == (ChunkOutcome(ack=evicted) if auto_ack else ChunkOutcome(redeliver=evicted))
    assert assembler.pending_count == 2
    late = _feed(assembler, "a", [2], [5])  # its start was evicted
    assert late[0].message is None
    assert _feed(assembler, "b", [1, 2], [6, 7])[1].message is not None


def test_incomplete_messages_expire_and_are_acknowledged() -> None:
    assembler = ChunkAssembler(expire_time_of_incomplete_chunked_message_ms=1_000)
    assert assembler.next_expiry() is None
    _feed(assembler, "old", [0], [1], now=5_000)
    _feed(assembler, "new", [0, 1], [2, 3], now=5_500)
    assert assembler.next_expiry() == 6_001
    assert assembler.expire(6_000) == ChunkOutcome()
    assert assembler.expire(6_001) == ChunkOutcome(ack=(MessageId(1, 1),))
    assert assembler.expire(6_501) == ChunkOutcome(ack=(MessageId(1, 2), MessageId(1, 3)))
    assert assembler.pending_count == 0
    never = ChunkAssembler(expire_time_of_incomplete_chunked_message_ms=0)
    _feed(never, "u", [0], [1], now=0)
    assert never.expire(10**15) == ChunkOutcome()
    assert never.next_expiry() is None
    never.clear()
    assert never.pending_count == 0


def test_random_duplicate_copies_still_give_each_message_once() -> None:
    rng = random.Random(11)
    assembler = ChunkAssembler(max_pending_chunked_message=0)
    payloads = {f"m{i}": [os.urandom(rng.randint(1, 20)) for _ in range(4)] for i in range(30)}
    completed: dict[str, bytes] = {}
    acked: list[MessageId] = []
    duplicates: list[MessageId] = []
    entry = 0
    for uuid, pieces in payloads.items():
        chunk_ids = []
        for chunk_id in range(4):
            chunk_ids.append(chunk_id)
            # A second stored copy of a chunk already seen, before the message completes
            # (after it, the copy is an orphan chunk: see the gap test).
            if 0 < chunk_id < 3 and rng.random() < 0.8:
                chunk_ids.append(rng.randint(1, chunk_id))
        seen = -1
        for chunk_id in chunk_ids:
            entry += 1
            if chunk_id <= seen:
                duplicates.append(MessageId(1, entry))
            seen = max(seen, chunk_id)
            outcome = assembler.add(
                _chunk_metadata(uuid, chunk_id, 4, sum(map(len, pieces))),
                pieces[chunk_id],
                MessageId(1, entry),
                0,
            )
            acked += outcome.ack
            assert outcome.redeliver == ()
            if outcome.message is not None:
                assert uuid not in completed
                completed[uuid] = outcome.message.payload
    assert completed == {uuid: b"".join(pieces) for uuid, pieces in payloads.items()}
    assert acked == duplicates
    assert len(duplicates) > 10


# --------------------------------------------------------------------------- interop


@pytest.mark.integration
@pytest.mark.compat
def test_official_consumer_reassembles_our_chunks(broker: BrokerThread) -> None:
    topic = "persistent://public/default/our-chunks"
    payload = os.urandom(TWELVE_MIB // 2) + bytes(TWELVE_MIB // 2)
    metadata = message_metadata(
        OutgoingMessage(payload, 0, properties={"size": "12MiB"}),
        producer_name="our-chunker",
        publish_time=1_700_000_000_000,
    )
    stored = compress_payload(metadata, payload, CompressionType.LZ4)
    chunks = split_into_chunks(metadata, stored, broker.config.max_message_size)
    assert len(chunks) >= 2
    client = new_client(broker.url)
    try:
        consumer = client.subscribe(
            topic, "official", initial_position=pulsar.InitialPosition.Earliest
        )
        with RawSession(broker.port) as session:
            producer = commands.producer(topic, 1, 1, producer_name="our-chunker")
            assert session.request(producer, 1).type == T.PRODUCER_SUCCESS
            for chunk in chunks:
                session.send(chunk.send(1))
            receipts = [session.take(lambda f: f.type == T.SEND_RECEIPT) for _ in chunks]
        message = consumer.receive(10_000)
        assert message.data() == payload
        assert message.properties() == {"size": "12MiB"}
        ids = [r.command.send_receipt.message_id for r in receipts]
        expected = ChunkedMessageId(
            MessageId(ids[0].ledgerId, ids[0].entryId), MessageId(ids[-1].ledgerId, ids[-1].entryId)
        )
        assert message.message_id().serialize() == expected.serialize()
    finally:
        close_client(client)


@pytest.mark.integration
@pytest.mark.compat
def test_our_assembler_reassembles_the_official_producers_chunks(broker: BrokerThread) -> None:
    topic = "persistent://public/default/official-chunks"
    payload = os.urandom(TWELVE_MIB // 2) + bytes(TWELVE_MIB // 2)
    client = new_client(broker.url)
    try:
        producer = client.create_producer(
            topic,
            producer_name="official-chunker",
            chunking_enabled=True,
            batching_enabled=False,
            compression_type=pulsar.CompressionType.ZSTD,
        )
        sent_id = producer.send(payload, properties={"k": "v"})
    finally:
        close_client(client)
    assembler = ChunkAssembler()
    with RawSession(broker.port, timeout=30) as session:
        subscribe = commands.subscribe(
            topic, "raw", 1, 1, SubType.Exclusive, initial_position=InitialPosition.Earliest
        )
        assert session.request(subscribe, 1).type == T.SUCCESS
        session.send(commands.flow(1, 100))
        outcome = ChunkOutcome()
        while outcome.message is None:
            frame = session.take(lambda f: f.type == T.MESSAGE)
            assert frame.entry is not None
            metadata, piece = decode_entry(frame.entry)
            assert is_chunk(metadata)
            message_id = MessageId.from_pb(frame.command.message.message_id)
            outcome = assembler.add(metadata, piece, message_id, now=0)
            assert outcome.ack == outcome.redeliver == ()
    message = outcome.message
    assert message.metadata.uuid == chunk_uuid("official-chunker", 0)
    assert message.metadata.compression == CompressionType.ZSTD
    data = compression.decode(
        message.metadata.compression, message.payload, message.metadata.uncompressed_size
    )
    assert data == payload
    assert {kv.key: kv.value for kv in message.metadata.properties} == {"k": "v"}
    assert message.message_id.serialize() == sent_id.serialize()
