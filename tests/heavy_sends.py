"""Entries of the SEND shapes that once kept the broker's event loop busy for seconds (issue #24).

Shared by the stall benchmark (``bench/bench_stall.py``), the session fuzzer and the publish
path's tests, so all three send the same bytes. Each builder returns a whole entry
(``[metadataSize][MessageMetadata][payload]``); none does any I/O.
"""

from __future__ import annotations

from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.compression import encode as compress
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY, CompressionType
from protocol.metadata import encode_entry

_EMPTY_RECORD = encode_batch([SingleMessage(b"")])  # 6 bytes: size, then payload_size = 0


def empty_record_batch(
    producer_name: str, sequence_id: int, payload_bytes: int = 4 << 20
) -> tuple[bytes, int]:
    """An uncompressed batch of ``payload_bytes`` of empty records, and its message count.

    Sent at or below the producer's high-water mark it takes dedup's rare path, which used to
    read every record's sequence id (4 MiB: ~700,000 records, ~4 s on the loop)."""
    count = max(2, payload_bytes // len(_EMPTY_RECORD))
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=count,
    )
    return encode_entry(metadata, _EMPTY_RECORD * count), count


def zstd_key_bomb(
    producer_name: str, sequence_id: int, key: str, uncompressed_bytes: int = 8 << 20
) -> tuple[bytes, int]:
    """A zstd batch of ``uncompressed_bytes`` of 6-byte records, the first with an idempotency
    key, and its message count: under 1 KiB on the wire, and once ~10 s of the key check."""
    keyed = encode_batch([SingleMessage(b"", properties={IDEMPOTENCY_KEY_PROPERTY: key})])
    count = max(2, (uncompressed_bytes - len(keyed)) // len(_EMPTY_RECORD) + 1)
    plain = keyed + _EMPTY_RECORD * (count - 1)
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=count,
        compression=pb.CompressionType.ZSTD,
        uncompressed_size=len(plain),
    )
    return encode_entry(metadata, compress(CompressionType.ZSTD, plain)), count


def keyed_batch(
    producer_name: str, sequence_id: int, keys: list[str], payload: bytes = b"x"
) -> bytes:
    """An uncompressed batch with one idempotency key per message."""
    messages = [SingleMessage(payload, properties={IDEMPOTENCY_KEY_PROPERTY: k}) for k in keys]
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        num_messages_in_batch=len(keys),
    )
    return encode_entry(metadata, encode_batch(messages))


def chunk(
    producer_name: str, sequence_id: int, uuid: str, chunk_id: int, num_chunks: int, data: bytes
) -> bytes:
    """One chunk (PIP-37) of a chunked message of ``num_chunks`` chunks."""
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=1,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
        total_chunk_msg_size=num_chunks * len(data),
    )
    return encode_entry(metadata, data)
