"""protocol.metadata: EntryMetadata facts, entry split, malformed entries, SEND validation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import pb
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.metadata import (
    ChunkInfo,
    EntryMetadata,
    SendEntryChecker,
    decode_entry,
    encode_entry,
    parse_entry_metadata,
)


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


# --------------------------------------------------------------------------- SendEntryChecker


def encode_entry_partial(metadata: pb.MessageMetadata) -> bytes:
    header = metadata.SerializePartialToString()
    return len(header).to_bytes(4, "big") + header + b"payload"


def _entry(num_messages: int | None = None, **fields: object) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    for name, value in fields.items():
        setattr(metadata, name, value)
    if num_messages is not None:
        metadata.num_messages_in_batch = num_messages
    return encode_entry(metadata, b"payload")


def test_checker_accepts_single_and_batch_entries() -> None:
    checker = SendEntryChecker()
    assert checker.check(_entry(), 1) is None
    assert checker.check(_entry(num_messages=5), 5) is None
    assert checker.check(_entry(num_messages=1), 1) is None


@pytest.mark.parametrize(
    ("entry", "num_messages", "reason"),
    [
        (b"\x00\x00\x00\x08" + b"\xff" * 8 + b"payload", 1, "cannot parse"),
        (b"\x00\x00", 1, "shorter than"),
        (b"\x00\x00\x01\x00abc", 1, "exceeds"),
        (
            encode_entry_partial(pb.MessageMetadata(producer_name="p", sequence_id=1)),
            1,
            "lacks",
        ),
        (_entry(num_messages=3), 5, "contradicts"),
        (_entry(), 4, "contradicts"),
        (_entry(num_messages=0), 0, "contradicts"),
        (_entry(uuid="u", num_chunks_from_msg=3, chunk_id=3), 1, "chunk"),
        (_entry(uuid="u", num_chunks_from_msg=3, chunk_id=-1), 1, "chunk"),
        (_entry(num_chunks_from_msg=3, chunk_id=0), 1, "chunk"),
        (_entry(num_messages=2, uuid="u", num_chunks_from_msg=3, chunk_id=0), 2, "chunk"),
    ],
)
def test_checker_refuses_what_must_not_be_stored(
    entry: bytes, num_messages: int, reason: str
) -> None:
    with pytest.raises(RemoteProtocolError, match=reason):
        SendEntryChecker().check(entry, num_messages)


def test_checker_reports_chunks() -> None:
    checker = SendEntryChecker()
    first = checker.check(_entry(uuid="p-7", num_chunks_from_msg=3, chunk_id=0), 1)
    last = checker.check(_entry(uuid="p-7", num_chunks_from_msg=3, chunk_id=2), 1)
    assert first == ChunkInfo("p-7", 0, 3)
    assert not first.is_last
    assert last is not None
    assert last.is_last


def test_checker_state_does_not_leak_between_entries() -> None:
    """The checker parses into one reused message: a field of the previous entry must not
    survive into the next one."""
    checker = SendEntryChecker()
    assert checker.check(_entry(uuid="u", num_chunks_from_msg=3, chunk_id=1), 1) is not None
    assert checker.check(_entry(), 1) is None
    missing = encode_entry_partial(pb.MessageMetadata(producer_name="p", publish_time=3))
    with pytest.raises(RemoteProtocolError, match="lacks"):
        checker.check(missing, 1)


_FIELDS = st.one_of(
    st.builds(lambda v: ("producer_name", v), st.text(max_size=8)),
    st.builds(lambda v: ("sequence_id", v), st.integers(0, 2**64 - 1)),
    st.builds(lambda v: ("publish_time", v), st.integers(0, 2**64 - 1)),
    st.builds(lambda v: ("num_messages_in_batch", v), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda v: ("num_chunks_from_msg", v), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda v: ("chunk_id", v), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda v: ("uuid", v), st.text(max_size=4)),
    st.builds(lambda v: ("partition_key", v), st.text(max_size=4)),
    st.builds(lambda v: ("deliver_at_time", v), st.integers(-(2**63), 2**63 - 1)),
)


@st.composite
def _metadata_bytes(draw: st.DrawFn) -> bytes:
    """Arbitrary bytes, or a metadata with random fields (the required ones usually present,
    chunk and batch fields often consistent), possibly mutated."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=64))
    metadata = pb.MessageMetadata()
    required = [("producer_name", "p"), ("sequence_id", 3), ("publish_time", 5)]
    for name, value in required:
        if draw(st.integers(0, 9)):
            setattr(metadata, name, value)
    if draw(st.booleans()):
        chunks = draw(st.integers(1, 4))
        metadata.num_chunks_from_msg = chunks
        metadata.chunk_id = draw(st.integers(-1, chunks))
        metadata.uuid = draw(st.sampled_from(["", "p-3"]))
    if draw(st.booleans()):
        metadata.num_messages_in_batch = draw(st.integers(-1, 3))
    for name, value in draw(st.lists(_FIELDS, max_size=4)):
        setattr(metadata, name, value)
    header = bytearray(metadata.SerializePartialToString())
    if draw(st.integers(0, 3)) == 0:
        for index, byte in draw(st.lists(st.tuples(st.integers(0, 63), st.integers(0, 255)))):
            if header:
                header[index % len(header)] = byte
    return bytes(header)


@given(header=_metadata_bytes(), num_messages=st.integers(0, 3), payload=st.binary(max_size=8))
@settings(max_examples=2000, deadline=None)
def test_an_accepted_entry_always_parses_later(
    header: bytes, num_messages: int, payload: bytes
) -> None:
    """What the broker stores after this check, dispatch and dedup replay can read."""
    entry = len(header).to_bytes(4, "big") + header + payload
    try:
        chunk = SendEntryChecker().check(entry, num_messages)
    except RemoteProtocolError:
        return
    facts = parse_entry_metadata(entry)
    assert facts.num_messages == num_messages
    assert (chunk is not None) == (facts.num_chunks > 0)
    if chunk is not None:
        assert facts.chunk_id == chunk.chunk_id
        assert facts.is_partial_chunk == (not chunk.is_last)


@pytest.mark.parametrize("field", ["producer_name", "partition_key", "uuid"])
def test_checker_and_parser_refuse_names_that_are_not_utf8(field: str) -> None:
    """proto2 keeps such a string as bytes: a broker keying dedup or Key_Shared on it breaks."""
    metadata = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, partition_key="k"
    )
    if field == "uuid":
        metadata.uuid, metadata.num_chunks_from_msg, metadata.chunk_id = "xyzzy", 2, 0
    else:
        setattr(metadata, field, "xyzzy")
    entry = encode_entry(metadata, b"payload")
    assert entry.count(b"xyzzy") == 1
    entry = entry.replace(b"xyzzy", b"\xff" * 5)
    with pytest.raises(RemoteProtocolError):
        SendEntryChecker().check(entry, 1)
    if field != "uuid":
        with pytest.raises(RemoteProtocolError, match="UTF-8"):
            parse_entry_metadata(entry)
