"""client/batching.py's fast paths (``SendEncoder``, the builder's record template,
``OutgoingMessage.numbered``) give exactly the bytes of the general encoding, message after
message through the same reused templates."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from client.batching import (
    BatchBuilder,
    OutgoingMessage,
    SendEncoder,
    _record_header,
    encode_message,
)
from protocol import commands
from protocol.enums import CompressionType
from protocol.metadata import decode_entry

_plain = st.builds(
    lambda payload, sequence_id: OutgoingMessage(payload, sequence_id),
    st.binary(max_size=40),
    st.integers(0, 2**64 - 1),
)
_any = st.builds(
    OutgoingMessage,
    st.binary(max_size=40),
    st.integers(0, 2**64 - 1),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    st.none() | st.text(max_size=6),
    st.none() | st.binary(max_size=6),
    st.integers(0, 2**63 - 1),
    st.none() | st.integers(0, 2**63 - 1),
    st.booleans(),
)
_codecs = st.sampled_from(list(CompressionType))


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(_plain | _any, min_size=1, max_size=8),
    codec=_codecs,
    schema_version=st.none() | st.binary(min_size=1, max_size=8),
    producer_id=st.integers(0, 2**64 - 1),
)
def test_single_sends_equal_the_general_encoding(
    messages: list[OutgoingMessage],
    codec: CompressionType,
    schema_version: bytes | None,
    producer_id: int,
) -> None:
    encoder = SendEncoder(
        producer_id, producer_name="p-1", codec=codec, schema_version=schema_version
    )
    for publish_time, message in enumerate(messages, start=1_700_000_000_000):
        expected = encode_message(
            message,
            producer_name="p-1",
            publish_time=publish_time,
            codec=codec,
            schema_version=schema_version,
        )
        entry = encoder.entry(message, publish_time)
        assert entry == expected.entry
        assert encoder.send(message.sequence_id, entry) == expected.send(producer_id)
        assert entry == commands.send(producer_id, message.sequence_id, entry)[-len(entry) :]


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(st.lists(_plain | _any, min_size=1, max_size=6), min_size=1, max_size=4),
    codec=_codecs,
)
def test_batch_sends_equal_the_general_encoding(
    batches: list[list[OutgoingMessage]], codec: CompressionType
) -> None:
    encoder = SendEncoder(7, producer_name="p-1", codec=codec)
    builder = BatchBuilder(max_messages=100, max_bytes=1 << 20)
    plain_builder = BatchBuilder(max_messages=100, max_bytes=1 << 20)  # no codec: bytes to compare
    for batch in batches:
        batchable = [
            message.numbered(sequence_id)._replace(deliver_at_time=None)
            for sequence_id, message in enumerate(batch, start=10)
        ]
        for message in batchable:
            assert builder.add(message, 1_000)
        built = builder.build(producer_name="p-1", codec=codec)
        assert encoder.batch_send(built) == built.send(7)
        for message in batchable:
            assert plain_builder.add(message, 1_000)
        _metadata, payload = decode_entry(plain_builder.build(producer_name="p-1").entry)
        assert payload == b"".join(
            struct.pack(">I", len(_record_header(message)))
            + _record_header(message)
            + message.payload
            for message in batchable
        )


@given(message=_any, sequence_id=st.integers(0, 2**64 - 1))
def test_numbered_equals_replace(message: OutgoingMessage, sequence_id: int) -> None:
    numbered = message.numbered(sequence_id)
    assert numbered == message._replace(sequence_id=sequence_id)
    assert type(numbered) is OutgoingMessage
