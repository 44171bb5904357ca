"""``broker.publish.idempotency_keys``: the keys of an entry, read within bounded work (#24)."""

from __future__ import annotations

import pytest

from broker.publish.idempotency_keys import (
    MAX_KEYED_BATCH_MESSAGES,
    MAX_KEYED_HEADER_BYTES,
    MAX_KEYED_PROPERTIES,
    KeyScanRefused,
    entry_keys,
)
from protocol import pb
from protocol.batch import SingleMessage, encode_batch
from protocol.compression import encode as compress
from protocol.enums import IDEMPOTENCY_KEY_PROPERTY, CompressionType
from protocol.idempotency_scan import key_digest
from protocol.metadata import encode_entry
from tests.heavy_sends import keyed_batch, zstd_key_bomb

KEY = IDEMPOTENCY_KEY_PROPERTY


def digests(keys: list[str | None]) -> list[bytes | None]:
    return [None if key is None else key_digest(key.encode()) for key in keys]


def batch(messages: list[SingleMessage], codec: CompressionType | None = None) -> bytes:
    plain = encode_batch(messages)
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=len(messages)
    )
    if codec is not None:
        md.compression = codec  # type: ignore[assignment]
        md.uncompressed_size = len(plain)
        plain = compress(codec, plain)
    return encode_entry(md, plain)


def test_keys_of_a_batch_in_order() -> None:
    found = entry_keys(keyed_batch("p", 0, ["a", "b"]))
    assert found is not None
    assert found.is_batch
    assert found.keys == digests(["a", "b"])


def test_keys_of_a_compressed_batch_with_keyless_messages() -> None:
    entry = batch(
        [SingleMessage(b"x", properties={KEY: "k"}), SingleMessage(b"y")], CompressionType.ZSTD
    )
    found = entry_keys(entry)
    assert found is not None
    assert found.keys == digests(["k", None])


def test_a_keyless_compressed_batch_has_no_keys() -> None:
    assert entry_keys(batch([SingleMessage(b"x" * 100)] * 3, CompressionType.LZ4)) is None


def test_the_zstd_bomb_is_refused_by_its_declared_size() -> None:
    entry, _count = zstd_key_bomb("p", 0, "k")
    with pytest.raises(KeyScanRefused, match="maxMessageSize"):
        entry_keys(entry)
    # A broker configured for larger messages reads it, up to the message count bound.
    with pytest.raises(KeyScanRefused, match=f"at most {MAX_KEYED_BATCH_MESSAGES} messages"):
        entry_keys(entry, 16 << 20)


def test_a_keyed_batch_at_the_count_bound_is_read_and_one_more_is_refused() -> None:
    keys = [f"k{i}" for i in range(MAX_KEYED_BATCH_MESSAGES)]
    found = entry_keys(keyed_batch("p", 0, keys))
    assert found is not None
    assert found.keys == digests(keys)
    with pytest.raises(KeyScanRefused):
        entry_keys(keyed_batch("p", 0, [*keys, "one-more"]))


def test_property_dense_headers_are_refused() -> None:
    many = {f"p{j}": "" for j in range(MAX_KEYED_PROPERTIES // 50)}
    messages = [SingleMessage(b"", properties={**many, KEY: f"k{i}"}) for i in range(60)]
    with pytest.raises(KeyScanRefused, match="properties"):
        entry_keys(batch(messages))
    single = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    for j in range(MAX_KEYED_PROPERTIES + 1):
        single.properties.add(key=f"{j}", value="")
    single.properties.add(key=KEY, value="k")
    with pytest.raises(KeyScanRefused):
        entry_keys(encode_entry(single, b"x"))


def test_header_bytes_are_bounded() -> None:
    big = "v" * 1000
    count = MAX_KEYED_HEADER_BYTES // 1000 + 10
    messages = [SingleMessage(b"", properties={KEY: f"k{i}", "big": big}) for i in range(count)]
    with pytest.raises(KeyScanRefused, match="bytes of metadata"):
        entry_keys(batch(messages))


def test_more_records_than_declared_read_as_unreadable() -> None:
    """A batch whose records do not match its count is stored keyless, as always; the walk
    stops at the first record beyond the count."""
    payload = encode_batch([SingleMessage(b"", properties={KEY: "k"})] * 3)
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=2
    )
    assert entry_keys(encode_entry(md, payload)) is None
