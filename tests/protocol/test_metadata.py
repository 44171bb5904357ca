"""protocol.metadata: EntryMetadata facts, entry split and malformed entries."""

from __future__ import annotations

import struct

import pytest

from protocol import pb
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.metadata import EntryMetadata, decode_entry, encode_entry, parse_entry_metadata


def test_single_message_facts() -> None:
    metadata = pb.MessageMetadata(
        producer_name="prod", sequence_id=4, publish_time=1_700_000_000_000, partition_key="k"
    )
    entry = encode_entry(metadata, b"hello")
    assert parse_entry_metadata(entry) == EntryMetadata(
        producer_name="prod",
        sequence_id=4,
        highest_sequence_id=None,
        num_messages=1,
        is_batch=False,
        publish_time=1_700_000_000_000,
        partition_key="k",
        ordering_key=None,
        deliver_at_time=None,
        event_time=None,
        compression=0,
        payload_offset=len(entry) - 5,
    )


def test_batch_facts() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=10,
        publish_time=1,
        num_messages_in_batch=3,
        highest_sequence_id=12,
        ordering_key=b"ok",
        deliver_at_time=5,
        event_time=6,
        compression=pb.LZ4,
    )
    facts = parse_entry_metadata(encode_entry(metadata, b"x"))
    assert facts.is_batch
    assert facts.num_messages == 3
    assert facts.highest_sequence_id == 12
    assert facts.ordering_key == b"ok"
    assert facts.deliver_at_time == 5
    assert facts.event_time == 6
    assert facts.compression == pb.LZ4


def test_batch_of_one_is_still_a_batch() -> None:
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=1
    )
    facts = parse_entry_metadata(encode_entry(metadata, b""))
    assert facts.is_batch
    assert facts.num_messages == 1


def test_decode_entry_splits_metadata_and_payload() -> None:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    parsed, payload = decode_entry(encode_entry(metadata, b"payload bytes"))
    assert parsed == metadata
    assert payload == b"payload bytes"


def test_encode_entry_requires_required_fields() -> None:
    with pytest.raises(LocalProtocolError):
        encode_entry(pb.MessageMetadata(producer_name="p"), b"")


@pytest.mark.parametrize(
    "entry",
    [
        b"",
        b"\x00\x00\x01",
        struct.pack(">I", 100) + b"short",
        struct.pack(">I", 2) + b"\xff\xff",
        struct.pack(">I", 2) + b"\x10\x01",  # sequence_id only: required fields missing
    ],
)
def test_malformed_entries_rejected(entry: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_entry_metadata(entry)
