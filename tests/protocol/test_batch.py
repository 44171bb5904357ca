"""protocol.batch: encode/decode of [size][SingleMessageMetadata][payload] sequences."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import _speedups, pb
from protocol.batch import SingleMessage, decode_batch, encode_batch, py_split_batch
from protocol.errors import RemoteProtocolError


def test_matches_the_wire_bytes_of_the_cpp_client() -> None:
    # Seen on the wire from pulsar-client 3.13: payload_size=3, sequence_id=i, no other field.
    encoded = encode_batch(SingleMessage(f"b-{i}".encode(), sequence_id=i) for i in range(3))
    expected = b"".join(
        bytes.fromhex("00000004 1803 40") + bytes([i]) + f"b-{i}".encode() for i in range(3)
    )
    assert encoded == expected


def test_round_trip_with_every_field() -> None:
    messages = [
        SingleMessage(
            b"one",
            properties={"a": "1"},
            partition_key="k",
            ordering_key=b"o",
            event_time=99,
            sequence_id=5,
            partition_key_b64_encoded=True,
        ),
        SingleMessage(b"", null_value=True, null_partition_key=True, compacted_out=True),
    ]
    assert decode_batch(encode_batch(messages), count=2) == messages


def test_empty_batch() -> None:
    assert encode_batch([]) == b""
    assert decode_batch(b"") == []


def test_count_mismatch_rejected() -> None:
    payload = encode_batch([SingleMessage(b"x")])
    with pytest.raises(RemoteProtocolError, match="expected 2"):
        decode_batch(payload, count=2)


def _record(meta: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(meta)) + meta + payload


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00",  # truncated size
        struct.pack(">I", 50) + b"\x18\x01",  # metadata longer than the payload
        _record(pb.SingleMessageMetadata(payload_size=10).SerializeToString(), b"short"),
        _record(b"\xff\xff"),  # unparsable metadata
        _record(b""),  # payload_size (required) missing
        _record(b"\x0a\x04\x0a\x00\x12\x00"),  # a property, and no payload_size
        _record(pb.SingleMessageMetadata(payload_size=-1).SerializeToString()),
    ],
)
def test_malformed_batches_rejected(payload: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_batch(payload)


messages_strategy = st.lists(
    st.builds(
        SingleMessage,
        payload=st.binary(max_size=50),
        properties=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
        partition_key=st.none() | st.text(max_size=8),
        sequence_id=st.none() | st.integers(0, 2**64 - 1),
        event_time=st.integers(0, 2**63),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(messages_strategy)
def test_round_trip_property(messages: list[SingleMessage]) -> None:
    assert decode_batch(encode_batch(messages), count=len(messages)) == messages


def test_parsing_stops_at_the_first_record_beyond_the_count() -> None:
    payload = encode_batch([SingleMessage(b"")]) * 3 + b"\xff"  # garbage after the third
    with pytest.raises(RemoteProtocolError, match="more than the 2 messages"):
        decode_batch(payload, count=2)


def test_a_record_whose_payload_size_is_not_its_first_field() -> None:
    """Records start with payload_size (field 3) as clients write them, but the field order is
    free: one that comes after a property (field 1) is found all the same."""
    header = b"\x0a\x06\x0a\x01k\x12\x01v" + b"\x18\x02"
    (message,) = decode_batch(_record(header, b"hi"), count=1)
    assert message == SingleMessage(b"hi", properties={"k": "v"})


# --- the compiled split_batch against the reference -------------------------------------------

records_strategy = st.lists(
    st.one_of(
        messages_strategy.map(encode_batch),
        st.builds(_record, st.binary(max_size=12), st.binary(max_size=6)),
        st.binary(max_size=9),
        st.sampled_from(
            [
                _record(pb.SingleMessageMetadata(payload_size=-1).SerializeToString()),
                _record(pb.SingleMessageMetadata(payload_size=40).SerializeToString(), b"x"),
                _record(b"\x0a\x06\x0a\x01k\x12\x01v\x18\x02", b"hi"),
                _record(b""),
            ]
        ),
    ),
    max_size=4,
)


def _outcome(split: Any, payload: bytes | memoryview, count: int | None) -> Any:
    try:
        return [(meta.SerializeToString(), data) for meta, data in split(payload, count)]
    except RemoteProtocolError as exc:
        return (type(exc), str(exc), type(exc.__cause__))


@settings(max_examples=400, deadline=None)
@given(records_strategy, st.none() | st.integers(0, 40), st.booleans())
def test_compiled_split_batch_is_the_reference(
    parts: list[bytes], count: int | None, as_view: bool
) -> None:
    payload = b"".join(parts)
    given_payload: bytes | memoryview = memoryview(payload) if as_view else payload
    expected = _outcome(py_split_batch, payload, count)
    assert _outcome(_speedups.split_batch, given_payload, count) == expected
