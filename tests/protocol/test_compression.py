"""client/compression.py: the wire formats of the official clients, bounds, corrupt input, and
interop both ways with the official pulsar-client through a real broker."""

from __future__ import annotations

import os
import zlib

import pulsar
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.batching import BatchBuilder, OutgoingMessage, encode_message
from protocol import commands, compression
from protocol.batch import decode_batch
from protocol.compression import CompressionError
from protocol.enums import AckValidationError, CompressionType, InitialPosition, SubType
from protocol.metadata import decode_entry
from tests.helpers import BrokerThread, close_client, new_client
from tests.raw_client import RawSession, T

CODECS = [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY]
OFFICIAL = {
    CompressionType.LZ4: pulsar.CompressionType.LZ4,
    CompressionType.ZLIB: pulsar.CompressionType.ZLib,
    CompressionType.ZSTD: pulsar.CompressionType.ZSTD,
    CompressionType.SNAPPY: pulsar.CompressionType.SNAPPY,
}
SAMPLES = [b"", b"x", b"hello pulsar " * 200, os.urandom(3000) + bytes(5000)]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
@pytest.mark.parametrize("payload", SAMPLES, ids=["empty", "one", "text", "mixed"])
def test_round_trip(codec: CompressionType, payload: bytes) -> None:
    encoded = compression.encode(codec, payload)
    assert compression.decode(codec, encoded, len(payload)) == payload


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=4096), codec=st.sampled_from(list(CompressionType)))
def test_round_trip_any_bytes(payload: bytes, codec: CompressionType) -> None:
    assert compression.decode(codec, compression.encode(codec, payload), len(payload)) == payload


def test_formats_are_the_raw_ones_pulsar_puts_on_the_wire() -> None:
    payload = b"abcdefgh" * 100
    # ZLIB: zlib-wrapped deflate, readable by the standard library's independent zlib.
    assert zlib.decompress(compression.encode(CompressionType.ZLIB, payload)) == payload
    # ZSTD: one zstd frame (magic 0xFD2FB528, little-endian).
    assert compression.encode(CompressionType.ZSTD, payload)[:4] == b"\x28\xb5\x2f\xfd"
    # SNAPPY raw block: starts with the uncompressed length as a varint (800 = 0xa0 0x06),
    # not the framing format's stream identifier chunk (0xff 's' 'N' 'a' 'P' 'p' 'Y').
    assert compression.encode(CompressionType.SNAPPY, payload)[:2] == b"\xa0\x06"
    # LZ4 block: no frame magic (0x184D2204) and no 4-byte size prefix.
    lz4 = compression.encode(CompressionType.LZ4, payload)
    assert lz4[:4] != b"\x04\x22\x4d\x18"
    assert lz4[:4] != len(payload).to_bytes(4, "little")
    assert compression.encode(CompressionType.NONE, payload) == payload


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_corrupt_or_truncated_data_is_a_decompression_error(codec: CompressionType) -> None:
    payload = os.urandom(500) + b"z" * 5000
    encoded = compression.encode(codec, payload)
    for bad in (encoded[: len(encoded) // 2], b"\xff" * 64):
        with pytest.raises(CompressionError, match=f"corrupt {codec.name}") as caught:
            compression.decode(codec, bad, len(payload))
        assert caught.value.validation_error == AckValidationError.DecompressionError


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_the_declared_size_must_be_exact(codec: CompressionType) -> None:
    payload = b"0123456789" * 100
    encoded = compression.encode(codec, payload)
    for declared in (len(payload) - 1, len(payload) + 1, 0):
        with pytest.raises(CompressionError, match=codec.name) as caught:
            compression.decode(codec, encoded, declared)
        assert caught.value.validation_error == AckValidationError.DecompressionError


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_declared_size_above_the_bound_is_refused_before_allocating(
    codec: CompressionType,
) -> None:
    # 1 TiB declared: decoding must refuse it outright (allocating it would fail the test).
    encoded = compression.encode(codec, b"bomb" * 10)
    with pytest.raises(CompressionError) as caught:
        compression.decode(codec, encoded, 1 << 40)
    assert caught.value.validation_error == AckValidationError.UncompressedSizeCorruption
    with pytest.raises(CompressionError):
        compression.decode(codec, encoded, 40, max_uncompressed_size=39)
    assert compression.decode(codec, encoded, 40, max_uncompressed_size=40) == b"bomb" * 10
    with pytest.raises(CompressionError):
        compression.decode(codec, encoded, -1)
    assert compression.DEFAULT_MAX_UNCOMPRESSED_SIZE == 32 * 5 * 1024 * 1024


def test_a_bomb_cannot_expand_past_its_declared_size() -> None:
    bomb = compression.encode(CompressionType.ZSTD, bytes(64 * 1024 * 1024))
    assert len(bomb) < 10_000
    with pytest.raises(CompressionError):
        compression.decode(CompressionType.ZSTD, bomb, 1024)


def test_unknown_codecs() -> None:
    with pytest.raises(CompressionError) as caught:
        compression.decode(9, b"x", 1)
    assert caught.value.validation_error == AckValidationError.DecompressionError
    with pytest.raises(ValueError, match="unknown compression type 9"):
        compression.encode(9, b"x")
    assert compression.decode(CompressionType.NONE, memoryview(b"as is"), 123) == b"as is"


# --------------------------------------------------------------------------- interop


def _stored_entries(port: int, topic: str, count: int) -> list[bytes]:
    """Read ``count`` entries of ``topic`` from the start, as MESSAGE frames carry them."""
    with RawSession(port) as session:
        subscribe = commands.subscribe(
            topic, "raw-reader", 1, 1, SubType.Exclusive, initial_position=InitialPosition.Earliest
        )
        assert session.request(subscribe, 1).type == T.SUCCESS
        session.send(commands.flow(1, count))
        frames = [session.take(lambda f: f.type == T.MESSAGE) for _ in range(count)]
    return [frame.entry for frame in frames if frame.entry is not None]


def _publish(port: int, topic: str, name: str, sends: list[bytes]) -> None:
    """Send prepared SEND frames (producer id 1) and require a receipt for each."""
    with RawSession(port) as session:
        assert session.request(commands.producer(topic, 1, 1, producer_name=name), 1).type == (
            T.PRODUCER_SUCCESS
        )
        for frame in sends:
            session.send(frame)
        for _ in sends:
            reply = session.take(lambda f: f.type in (T.SEND_RECEIPT, T.SEND_ERROR))
            assert reply.type == T.SEND_RECEIPT, reply.command


@pytest.mark.integration
@pytest.mark.compat
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_official_producer_entries_decompress_with_ours(
    broker: BrokerThread, codec: CompressionType
) -> None:
    payloads = [f"message {i} ".encode() * (i + 1) for i in range(12)]
    client = new_client(broker.url)
    try:
        for batching in (False, True):
            topic = f"persistent://public/default/official-{codec.name}-{batching}"
            producer = client.create_producer(
                topic,
                compression_type=OFFICIAL[codec],
                batching_enabled=batching,
                batching_max_messages=len(payloads),
                batching_max_publish_delay_ms=60_000,
            )
            for payload in payloads:
                producer.send_async(payload, None)
            producer.flush()
            entries = _stored_entries(broker.port, topic, 1 if batching else len(payloads))
            received = []
            for entry in entries:
                metadata, stored = decode_entry(entry)
                assert metadata.compression == codec
                data = compression.decode(codec, stored, metadata.uncompressed_size)
                if batching:
                    batch = decode_batch(data, metadata.num_messages_in_batch)
                    received += [message.payload for message in batch]
                else:
                    received.append(data)
            assert received == payloads
    finally:
        close_client(client)


@pytest.mark.integration
@pytest.mark.compat
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_entries_we_compress_are_read_by_the_official_consumer(
    broker: BrokerThread, codec: CompressionType
) -> None:
    topic = f"persistent://public/default/ours-{codec.name}"
    payloads = [os.urandom(50) + b"compressible " * (i * 20) for i in range(9)]
    messages = [OutgoingMessage(payload, sequence_id=i) for i, payload in enumerate(payloads)]
    sends = [
        encode_message(m, producer_name="ours", publish_time=1, codec=codec).send(1)
        for m in messages[:4]
    ]
    builder = BatchBuilder()
    for message in messages[4:]:
        assert builder.add(message, now=1)
    sends.append(builder.build(producer_name="ours", codec=codec).send(1))
    client = new_client(broker.url)
    try:
        consumer = client.subscribe(
            topic, "official", initial_position=pulsar.InitialPosition.Earliest
        )
        _publish(broker.port, topic, "ours", sends)
        assert [consumer.receive(5000).data() for _ in payloads] == payloads
    finally:
        close_client(client)
