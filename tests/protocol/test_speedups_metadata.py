"""The compiled SendEntryChecker, decode_entry and parse_entry_metadata against the
reference: same chunk facts, entries and metadata facts, same errors.

Entries carry generated ``MessageMetadata``: every field, set or not, through protobuf's
serializer, or hand-written (any order, repeated, wrong wire types, unknown fields, groups,
names that are not UTF-8, properties that do or do not parse, chunk fields in and out of range),
and a ``num_messages`` that agrees with the batch size or not.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import _speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.errors import RemoteProtocolError
from protocol.metadata import (
    ChunkInfo,
    EntryMetadata,
    PySendEntryChecker,
    py_decode_entry,
    py_decode_entry_plain,
    py_decode_plain_entry_lazily,
    py_parse_entry_metadata,
)
from tests.protocol.speedups_wire import field_bytes, fields_of, ints, texts

# MessageMetadata field number -> wire type (PulsarApi.proto).
METADATA_FIELDS = {
    **dict.fromkeys([1, 4, 5, 6, 7, 13, 14, 15, 16, 18, 26], 2),
    **dict.fromkeys([2, 3, 8, 9, 11, 12, 17, 19, 20, 22, 23, 24, 25, 27, 28, 29, 30], 0),
}
SMALL = st.sampled_from([0, 1, 2, 3, 5, -1, (1 << 20), (1 << 20) + 1, 1 << 32])
KEY_VALUE = pb.KeyValue(key="k", value="v").SerializeToString()


@st.composite
def canonical_metadata(draw: st.DrawFn) -> bytes:
    """protobuf's own encoding of random values (required fields mostly present)."""
    md = pb.MessageMetadata()
    if draw(st.integers(0, 9)):
        md.producer_name = draw(st.sampled_from(["p", "producer-1", "\u00e9", ""]))
    if draw(st.integers(0, 9)):
        md.sequence_id = draw(ints) % (1 << 64)
    if draw(st.integers(0, 9)):
        md.publish_time = 1_700_000_000_000
    if draw(st.integers(0, 3)) == 0:
        md.num_messages_in_batch = draw(SMALL) % (1 << 31)
    if draw(st.booleans()):
        md.partition_key = draw(st.sampled_from(["", "key", "\u00fc"]))
    if draw(st.integers(0, 3)) == 0:
        md.num_chunks_from_msg = draw(st.one_of(st.just(3), SMALL)) % (1 << 31)
        md.chunk_id = draw(st.one_of(st.just(1), SMALL)) % (1 << 31)
        md.total_chunk_msg_size = 10
        if draw(st.integers(0, 4)):
            md.uuid = draw(st.sampled_from(["p-1-2", "", "\u00e9"]))
    for _ in range(draw(st.integers(0, 2))):
        md.properties.add(key="k", value=draw(st.sampled_from(["", "v"])))
    if draw(st.integers(0, 9)) == 0:
        md.encryption_keys.add(key="k", value=b"v")
    if draw(st.booleans()):
        md.ordering_key = b"ok"
        md.deliver_at_time = 5
        md.event_time = 3
        md.compression = draw(st.sampled_from([0, 1, 4]))
        md.highest_sequence_id = 9
        md.replicate_to.append("r")
        md.schema_version = b"\x00\x01"
        md.marker_type = 1
        md.txnid_least_bits = 2
        md.txnid_most_bits = 3
    return md.SerializePartialToString()


@st.composite
def hand_written_metadata(draw: st.DrawFn) -> bytes:
    """Fields written one by one, after (mostly) the three required ones."""
    head = b""
    if draw(st.integers(0, 5)):
        head = field_bytes(1, 2, draw(texts)) + field_bytes(2, 0, 1) + field_bytes(3, 0, 1)
    nested = st.one_of(
        st.just(KEY_VALUE),
        st.just(b"\x0b\x0c"),
        st.just(b"\x0a\x05k"),
        texts,
        st.binary(max_size=6),
    )
    return head + draw(fields_of(METADATA_FIELDS, nested))


@st.composite
def entries(draw: st.DrawFn) -> tuple[Any, Any]:
    metadata = draw(st.one_of(canonical_metadata(), hand_written_metadata()))
    size = len(metadata) + draw(st.sampled_from([0] * 10 + [1, -1, 1 << 31]))
    entry = struct.pack(">I", size % (1 << 32)) + metadata + draw(st.binary(max_size=8))
    entry = entry[: draw(st.sampled_from([len(entry)] * 10 + [0, 3, 5]))]
    kind = draw(st.integers(0, 19))
    shaped: Any = bytearray(entry) if kind == 0 else memoryview(entry) if kind == 1 else entry
    num_messages = draw(st.sampled_from([1] * 12 + [2, 0, -1, 1 << 63, (1 << 32) + 1, True]))
    return shaped, num_messages


def verdict(checker: Any, entry: Any, num_messages: Any) -> Any:
    try:
        return checker.check(entry, num_messages)
    except RemoteProtocolError as exc:
        return (type(exc), str(exc))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries(), min_size=1, max_size=4))
def test_same_verdicts_on_generated_entries(cases: list[tuple[Any, Any]]) -> None:
    # One checker per side for the whole list: the reference reuses its message between calls.
    reference, compiled = PySendEntryChecker(), _speedups.SendEntryChecker()
    for entry, num_messages in cases:
        assert verdict(compiled, entry, num_messages) == verdict(reference, entry, num_messages)


def _entry(md: pb.MessageMetadata) -> bytes:
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"payload"


def test_chunk_facts() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, uuid="p-0-1")
    md.num_chunks_from_msg, md.chunk_id = 3, 2
    assert _speedups.SendEntryChecker().check(_entry(md), 1) == ChunkInfo("p-0-1", 2, 3)
    md.num_chunks_from_msg = 0
    assert _speedups.SendEntryChecker().check(_entry(md), 1) is None


def test_errors_come_with_the_reference_message() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    md.num_messages_in_batch = 3
    message = "num_messages_in_batch 3 contradicts the SEND's num_messages 2"
    with pytest.raises(RemoteProtocolError, match=f"^{message}$"):
        _speedups.SendEntryChecker().check(_entry(md), 2)


# --- decode_entry (a consumer's per-entry parse) ----------------------------------------------


def decoded(decode: Any, entry: Any) -> Any:
    try:
        metadata, payload, *plain = decode(entry)
    except RemoteProtocolError as exc:
        return (type(exc), str(exc))
    seen = (type(metadata), metadata.SerializePartialToString(), metadata.ListFields(), payload)
    return (*seen, *plain)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries(), min_size=1, max_size=4))
def test_decode_entry_same_results_on_generated_entries(cases: list[tuple[Any, Any]]) -> None:
    for entry, _ in cases:
        assert decoded(_speedups.decode_entry, entry) == decoded(py_decode_entry, entry)
        assert decoded(_speedups.decode_entry_plain, entry) == decoded(py_decode_entry_plain, entry)


@pytest.mark.parametrize(
    ("fields", "plain"),
    [
        ({}, True),
        ({"num_messages_in_batch": 1}, False),  # a batch of one is still a batch
        ({"compression": 1}, False),
        ({"compression": 0}, True),
        ({"num_chunks_from_msg": 2, "chunk_id": 0, "uuid": "u"}, False),
    ],
)
def test_plain_entries(fields: dict[str, Any], plain: bool) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=5, **fields)
    assert _speedups.decode_entry_plain(_entry(md))[2] is plain
    assert py_decode_entry_plain(_entry(md))[2] is plain


def test_an_unknown_compression_reads_as_none_on_both_sides() -> None:
    """upb keeps an enum value it does not know aside: the field reads NONE."""
    metadata = field_bytes(1, 2, b"p") + field_bytes(2, 0, 1) + field_bytes(3, 0, 1)
    entry = struct.pack(">I", len(metadata) + 2) + metadata + b"\x40\x09" + b"payload"
    assert decoded(_speedups.decode_entry_plain, entry) == decoded(py_decode_entry_plain, entry)


@pytest.mark.parametrize(
    "key_value",
    [
        b"\x0a\x01k",  # no value: IsInitialized fails
        b"\x12\x01v",  # no key
        b"\x08\x01\x12\x01v",  # the key as a varint: an unknown field to upb, so still no key
        b"\x0a\x01k\x12\x00",  # an empty value is a value
    ],
)
def test_decode_entry_checks_properties_as_the_reference(key_value: bytes) -> None:
    metadata = (
        field_bytes(1, 2, b"p") + field_bytes(2, 0, 1) + field_bytes(3, 0, 1)
    ) + field_bytes(4, 2, key_value)
    entry = struct.pack(">I", len(metadata)) + metadata + b"payload"
    assert decoded(_speedups.decode_entry, entry) == decoded(py_decode_entry, entry)
    assert decoded(_speedups.decode_entry_plain, entry) == decoded(py_decode_entry_plain, entry)


def test_decode_entry_of_an_ordinary_entry() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=5)
    md.properties.add(key="a", value="b")
    metadata, payload = _speedups.decode_entry(_entry(md))
    assert (metadata, payload) == (md, b"payload")


# --- parse_entry_metadata (the broker's per-entry read when it dispatches) --------------------


def facts(parse: Any, entry: Any) -> Any:
    try:
        parsed = parse(entry)
    except RemoteProtocolError as exc:
        return (type(exc), str(exc))
    # Field by field with the types: True == 1 and 1.0 == 1 would hide a difference.
    return [(name, type(value), value) for name, value in _fields(parsed)]


def _fields(parsed: EntryMetadata) -> list[tuple[str, Any]]:
    assert type(parsed) is EntryMetadata
    return [(name, getattr(parsed, name)) for name in EntryMetadata.__slots__]


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries(), min_size=1, max_size=4))
def test_parse_entry_metadata_same_facts_on_generated_entries(cases: list[tuple[Any, Any]]) -> None:
    for entry, _ in cases:
        assert facts(_speedups.parse_entry_metadata, entry) == facts(py_parse_entry_metadata, entry)


def test_parse_entry_metadata_of_an_entry_with_every_fact() -> None:
    md = pb.MessageMetadata(producer_name="p\u00e9", sequence_id=(1 << 64) - 1, publish_time=5)
    md.num_messages_in_batch = 7
    md.partition_key, md.ordering_key = "k", b"\x00o"
    md.deliver_at_time, md.event_time, md.highest_sequence_id = -3, 11, 12
    md.compression = pb.ZSTD
    md.num_chunks_from_msg, md.chunk_id, md.uuid = 4, 2, "u"
    entry = _entry(md)
    expected = EntryMetadata(
        producer_name="p\u00e9",
        sequence_id=(1 << 64) - 1,
        highest_sequence_id=12,
        num_messages=7,
        is_batch=True,
        publish_time=5,
        partition_key="k",
        ordering_key=b"\x00o",
        deliver_at_time=-3,
        event_time=11,
        compression=pb.ZSTD,
        payload_offset=len(entry) - len(b"payload"),
        chunk_id=2,
        num_chunks=4,
    )
    assert _speedups.parse_entry_metadata(entry) == expected == py_parse_entry_metadata(entry)


@pytest.mark.parametrize(
    "extra",
    [
        b"\x40\x09",  # compression 9: unknown to upb, which reads NONE (the reference decides)
        field_bytes(4, 2, b"\x0a\x01k"),  # a property without value: not initialized
        field_bytes(13, 2, b"\x0a\x01k\x12\x01v"),  # encryption keys: left to the reference
        field_bytes(6, 2, b"\xff"),  # a partition key that is not UTF-8
    ],
)
def test_parse_entry_metadata_leaves_the_odd_cases_to_the_reference(extra: bytes) -> None:
    metadata = field_bytes(1, 2, b"p") + field_bytes(2, 0, 1) + field_bytes(3, 0, 1) + extra
    entry = struct.pack(">I", len(metadata)) + metadata + b"payload"
    assert facts(_speedups.parse_entry_metadata, entry) == facts(py_parse_entry_metadata, entry)


def test_parse_entry_metadata_reads_ordinary_entries_itself() -> None:
    """The fast path really runs: with a reference that refuses every call, ordinary entries
    (a single message, a keyed batch, a delayed message) still parse."""

    def no_reference(entry: Any) -> EntryMetadata:
        raise AssertionError("the reference was asked")

    ordinary = [
        pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2),
        pb.MessageMetadata(
            producer_name="p", sequence_id=1, publish_time=2, num_messages_in_batch=10
        ),
        pb.MessageMetadata(
            producer_name="p", sequence_id=1, publish_time=2, partition_key="k", deliver_at_time=9
        ),
    ]
    _speedups.bind_parse_entry_metadata(no_reference, EntryMetadata)
    try:
        for md in ordinary:
            assert _speedups.parse_entry_metadata(_entry(md)) == py_parse_entry_metadata(_entry(md))
    finally:
        _speedups.bind_parse_entry_metadata(py_parse_entry_metadata, EntryMetadata)


# --- decode_plain_entry_lazily (a consumer's shortcut for one plain message) -----------------


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries(), min_size=1, max_size=4))
def test_decode_plain_entry_lazily_agrees_with_the_reference(cases: list[tuple[Any, Any]]) -> None:
    """The compiled shortcut may decline (None: decode_entry_plain decides) but never accepts
    what the reference would not, and what it keeps parses to the reference's metadata."""
    for entry, _ in cases:
        fast = _speedups.decode_plain_entry_lazily(entry)
        reference = py_decode_plain_entry_lazily(entry)
        if fast is None:
            continue
        assert fast == reference
        metadata, payload, plain = py_decode_entry_plain(entry)
        assert plain
        assert pb.MessageMetadata.FromString(fast[0]) == metadata
        assert fast[1] == payload


@pytest.mark.parametrize(
    ("fields", "kept"),
    [
        ({}, True),
        ({"partition_key": "k", "event_time": 5, "ordering_key": b"o"}, True),
        ({"num_messages_in_batch": 1}, False),
        ({"compression": 0}, False),  # the field is there: decode_entry_plain reads it
        ({"compression": 1}, False),
        ({"num_chunks_from_msg": 2, "chunk_id": 0, "uuid": "u"}, False),
    ],
)
def test_decode_plain_entry_lazily_keeps_only_plain_messages(
    fields: dict[str, Any], kept: bool
) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=5, **fields)
    md.properties.add(key="a", value="b")
    for decode in (_speedups.decode_plain_entry_lazily, py_decode_plain_entry_lazily):
        lazily = decode(_entry(md))
        assert (lazily is not None) is kept
        if lazily is not None:
            assert lazily == (md.SerializeToString(), b"payload")
