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


# --- frames and socket streams (test_speedups_frames.py, test_speedups_messages.py) ----------


@st.composite
def commands_around(
    draw: st.DrawFn, body: bytes, type_value: int, wrong_types: list[bytes]
) -> bytes:
    """The BaseCommand around a sub-command ``body`` whose field number and type value are
    both ``type_value`` (SEND 6, MESSAGE 9): mostly ``type`` then the sub-command, as peers
    write it; sometimes reversed, with another or no type, or followed by an odd field."""
    shape = draw(st.integers(0, 19))
    if shape == 0:  # the sub-command first, then type
        return field_bytes(type_value, 2, body) + field_bytes(1, 0, type_value)
    if shape == 1:  # another type value, an over-long type varint, or no type at all
        kind = draw(st.sampled_from([*wrong_types, b""]))
        return kind + field_bytes(type_value, 2, body)
    own = field_bytes(1, 0, type_value)
    if shape == 2:  # an unknown or repeated field of BaseCommand after the sub-command
        extra = draw(st.sampled_from([field_bytes(200, 0, 1), own, b"\x00"]))
        return own + field_bytes(type_value, 2, body) + extra
    return own + field_bytes(type_value, 2, body)


@st.composite
def mutated_frames(draw: st.DrawFn, command: bytes) -> bytes:
    """``command`` framed with a generated payload section, now and then broken: a command
    size past the frame or too small, a byte changed anywhere, a total size below 4."""
    frame = frame_of(command, draw(payload_sections()))
    mutation = draw(st.integers(0, 15))
    if mutation == 0:
        size = draw(st.sampled_from([len(command) + 1, 0, 3, len(command) + 1000]))
        frame = frame[:4] + struct.pack(">I", size) + frame[8:]
    elif mutation == 1:
        at = draw(st.integers(0, len(frame) - 1))
        frame = frame[:at] + bytes([frame[at] ^ draw(st.integers(1, 255))]) + frame[at + 1 :]
    elif mutation == 2:
        frame = struct.pack(">I", draw(st.integers(0, 3))) + frame[4:]
    return frame


@st.composite
def socket_streams(
    draw: st.DrawFn, frames: st.SearchStrategy[bytes], limits: list[int]
) -> tuple[list[bytes], int]:
    """Frames as the socket delivers them: one stream of up to four of ``frames``, maybe its
    last frame incomplete, cut into chunks at random places; with a frame size limit."""
    data = b"".join(draw(st.lists(frames, max_size=4)))
    if data and draw(st.integers(0, 4)) == 0:
        data = data[: draw(st.integers(0, len(data) - 1))]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return chunks, draw(st.sampled_from(limits))
