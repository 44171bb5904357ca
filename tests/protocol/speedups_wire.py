"""Hand-written protobuf wire bytes for the compiled-vs-reference tests (test_speedups_*.py).

The generators write fields one by one (any order, repeated, of the wrong wire type, with
over-long or 64-bit varints, unknown numbers, groups), because protobuf's own serializer only
ever writes the one canonical layout, and the compiled fast paths must agree with the reference
on every other layout too.
"""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import strategies as st

from protocol import _speedups
from protocol._pb import PulsarApi_pb2 as pb
from protocol.checksum import py_crc32c
from protocol.errors import RemoteProtocolError
from protocol.framing import Frame

U64 = (1 << 64) - 1

#: Integers where varint lengths, int32 truncation and signedness change.
EDGE_INTS = [
    0,
    1,
    2,
    127,
    128,
    (1 << 20),
    (1 << 20) + 1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    U64,
    U64 - 5,
]


def varint(value: int, *, pad: int = 0) -> bytes:
    """The varint of ``value`` (mod 2**64), with ``pad`` redundant continuation bytes."""
    value &= U64
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    if pad:  # the same number, spelled longer: more groups of seven zero bits
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint(field << 3 | wire)


def field_bytes(field: int, wire: int, value: int | bytes, pad: int = 0) -> bytes:
    """One field: ``value`` is an int for wire types 0, 1, 5 and bytes for 2 (and groups)."""
    head = tag(field, wire)
    if wire == 0:
        assert isinstance(value, int)
        return head + varint(value, pad=pad)
    if wire == 1:
        assert isinstance(value, int)
        return head + struct.pack("<Q", value & U64)
    if wire == 5:
        assert isinstance(value, int)
        return head + struct.pack("<I", value & 0xFFFFFFFF)
    assert isinstance(value, bytes)
    if wire == 2:
        return head + varint(len(value)) + value
    return head + value + tag(field, 4)  # a group (wire type 3) and its end tag


ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(0, U64), st.integers(-(1 << 63), -1))

#: Strings as their bytes: plain, empty, and not valid UTF-8 (upb keeps those as bytes).
texts = st.one_of(
    st.sampled_from([b"", b"p", b"producer-1", "\u00e9t\u00e9".encode(), b"\xff", b"\xed\xa0\x80"]),
    st.text(max_size=12).map(str.encode),
    st.binary(max_size=12),
)


@st.composite
def fields_of(
    draw: st.DrawFn, known: dict[int, int], length_values: st.SearchStrategy[bytes]
) -> bytes:
    """A message body: fields of ``known`` (number -> wire type), mostly of their own wire type,
    some of another, some unknown numbers; with over-long varints now and then."""
    parts = []
    for _ in range(draw(st.integers(0, 10))):
        number = draw(st.one_of(st.sampled_from(sorted(known)), st.integers(1, 40)))
        wire = known.get(number, 0)
        if draw(st.integers(0, 9)) == 0:
            wire = draw(st.sampled_from([0, 1, 2, 3, 5]))
        pad = draw(st.sampled_from([0, 0, 0, 0, 1, 3]))
        if wire in (2, 3):
            value: int | bytes = draw(length_values)
        else:
            value = draw(ints)
        parts.append(field_bytes(number, wire, value, pad))
    return b"".join(parts)


def frame_of(command: bytes, payload: bytes = b"") -> bytes:
    """``[totalSize][commandSize][command][payload section]``."""
    return struct.pack(">II", 4 + len(command) + len(payload), len(command)) + command + payload


SEND_NAMES = [
    "producer_id",
    "sequence_id",
    "num_messages",
    "txnid_least_bits",
    "txnid_most_bits",
    "highest_sequence_id",
    "is_chunk",
    "marker",
    "message_id",
]


# --- comparing the two decoders -----------------------------------------------------------


MESSAGE_NAMES = ["consumer_id", "redelivery_count", "consumer_epoch"]
MESSAGE_ID_NAMES = ["ledgerId", "entryId", "partition", "batch_index"]


def full_command(frame: Frame) -> pb.BaseCommand:
    command: Any = frame.command
    if isinstance(command, (_speedups.SendCommand, _speedups.MessageCommand)):
        parsed: pb.BaseCommand = command._full()
        return parsed
    return frame.command


def describe(frame: Frame, identity: Any) -> tuple[Any, ...]:
    """Everything a reader of the frame can see, the broker's dedup identity included."""
    command = full_command(frame)
    seen: list[Any] = [frame.type, frame.entry, frame.checksum_valid, frame.has_checksum]
    seen.append(command.SerializePartialToString())
    if frame.type == pb.BaseCommand.SEND:
        send: Any = frame.command.send
        seen.append(identity(send))
        seen.append([getattr(send, name) for name in SEND_NAMES])
        seen.append([send.HasField(name) for name in SEND_NAMES])
        seen.append(frame.command.HasField("send"))
    if frame.type == pb.BaseCommand.MESSAGE:
        message: Any = frame.command.message
        seen.append([getattr(message, name) for name in MESSAGE_NAMES])
        seen.append([message.HasField(name) for name in [*MESSAGE_NAMES, "message_id"]])
        seen.append(list(message.ack_set))
        seen.append([getattr(message.message_id, name) for name in MESSAGE_ID_NAMES])
        seen.append([message.message_id.HasField(name) for name in MESSAGE_ID_NAMES])
        seen.append(list(message.message_id.ack_set))
    return tuple(seen)


def outcomes(decoder: Any, chunks: list[bytes], identity: Any) -> list[Any]:
    """What decoding the chunks gives: frames and the error (class and message), in order."""
    seen: list[Any] = []
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            seen.extend(describe(frame, identity) for frame in decoder)
        seen.append(("buffered", decoder.buffered))
    except RemoteProtocolError as exc:
        seen.append((type(exc), str(exc)))
        try:  # a failed decoder refuses more input, with the same message
            decoder.feed(b"\x00")
        except RemoteProtocolError as again:
            seen.append((type(again), str(again)))
    return seen


# --- payload sections (SEND and MESSAGE frames) ----------------------------------------------


@st.composite
def metadata_entries(draw: st.DrawFn) -> bytes:
    """``[metadataSize][metadata][payload]``; the size sometimes wrong, the entry short."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=draw(ints) % (1 << 64))
    metadata.publish_time = 1
    if draw(st.booleans()):
        metadata.num_messages_in_batch = draw(st.integers(-2, 3))
    raw = metadata.SerializePartialToString()
    payload = draw(st.binary(max_size=16))
    size = len(raw) + draw(st.sampled_from([0] * 12 + [1, -1, 1000]))
    entry = struct.pack(">I", size % (1 << 32)) + raw + payload
    return entry[: draw(st.sampled_from([len(entry)] * 12 + [3, 0]))]


@st.composite
def payload_sections(draw: st.DrawFn) -> bytes:
    entry = draw(metadata_entries())
    crc = py_crc32c(entry)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return entry
    if kind == 1:  # a bad checksum
        return struct.pack(">HI", 0x0E01, crc ^ draw(st.integers(1, 0xFFFFFFFF))) + entry
    if kind == 2:  # broker entry metadata (a MESSAGE thing) in front of the checksum
        broker_metadata = draw(st.binary(max_size=6))
        section = struct.pack(">HI", 0x0E02, len(broker_metadata)) + broker_metadata
        return section + struct.pack(">HI", 0x0E01, crc) + entry
    if kind == 3:  # a checksum and no entry behind it, or a bare magic
        return struct.pack(">HI", 0x0E01, crc)[: draw(st.integers(2, 6))]
    return struct.pack(">HI", 0x0E01, crc) + entry
