"""FrameDecoder / encode_command / encode_payload_command: layout, limits and rejections."""

from __future__ import annotations

import struct

import pytest

from protocol import commands, pb
from protocol.checksum import crc32c
from protocol.errors import LocalProtocolError, RemoteProtocolError
from protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    SUB_MESSAGE_NAME,
    Frame,
    FrameDecoder,
    encode_command,
    encode_payload_command,
)
from protocol.ids import MessageId
from protocol.metadata import encode_entry

T = pb.BaseCommand


def make_entry(payload: bytes = b"payload", sequence_id: int = 0) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    return encode_entry(metadata, payload)


def decode_all(data: bytes, **options: int) -> list[Frame]:
    decoder = FrameDecoder(**options)
    decoder.feed(data)
    return list(decoder)


def raw_frame(command_bytes: bytes, tail: bytes = b"") -> bytes:
    size = len(command_bytes)
    return struct.pack(">II", 4 + size + len(tail), size) + command_bytes + tail


def test_default_limit_is_java_broker_frame_limit() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 5_253_120
    assert FrameDecoder().max_frame_size == 5_253_120


def test_simple_frame_layout() -> None:
    frame = commands.ping()
    total, size = struct.unpack_from(">II", frame)
    assert total == len(frame) - 4
    assert size == len(frame) - 8
    command = pb.BaseCommand.FromString(frame[8:])
    assert command.type == T.PING
    assert command.HasField("ping")


def test_payload_frame_layout_and_checksum() -> None:
    entry = make_entry()
    frame = commands.send(1, 2, entry)
    total, size = struct.unpack_from(">II", frame)
    assert total == len(frame) - 4
    magic, checksum = struct.unpack_from(">HI", frame, 8 + size)
    assert magic == MAGIC_CRC32C
    assert frame[8 + size + 6 :] == entry
    assert checksum == crc32c(entry)


def test_payload_frame_without_checksum() -> None:
    entry = make_entry()
    [frame] = decode_all(commands.send(1, 2, entry, checksum=False))
    assert frame.entry == entry
    assert not frame.has_checksum
    assert frame.checksum_valid
    assert frame.entry_crc == -1  # nothing verified: storage computes the record CRC itself


def test_decodes_send() -> None:
    entry = make_entry(b"x" * 100)
    [frame] = decode_all(commands.send(5, 9, entry, num_messages=1))
    assert frame.type == T.SEND
    assert frame.command.send.producer_id == 5
    assert frame.command.send.sequence_id == 9
    assert frame.entry == entry
    assert type(frame.entry) is bytes
    assert frame.has_checksum
    assert frame.checksum_valid
    assert frame.entry_crc == crc32c(entry)  # the verified checksum, for the storage to reuse


def test_checksum_mismatch_is_reported_not_raised() -> None:
    data = bytearray(commands.send(1, 0, make_entry()))
    data[-1] ^= 0x01
    [frame] = decode_all(bytes(data))
    assert frame.has_checksum
    assert not frame.checksum_valid
    assert frame.entry_crc == -1


def test_broker_entry_metadata_is_skipped() -> None:
    entry = make_entry()
    body = pb.BaseCommand(type=T.MESSAGE)
    body.message.consumer_id = 3
    MessageId(1, 2).write_to(body.message.message_id)
    command = body.SerializeToString()
    broker_meta = pb.BrokerEntryMetadata(broker_timestamp=123, index=4).SerializeToString()
    tail = (
        struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(broker_meta))
        + broker_meta
        + struct.pack(">HI", MAGIC_CRC32C, crc32c(entry))
        + entry
    )
    [frame] = decode_all(raw_frame(command, tail))
    assert frame.entry == entry
    assert frame.has_checksum
    assert frame.checksum_valid
    assert frame.entry_crc == crc32c(entry)


def test_broker_entry_metadata_without_checksum() -> None:
    entry = make_entry()
    command = pb.BaseCommand(type=T.MESSAGE)
    command.message.consumer_id = 3
    MessageId(1, 2).write_to(command.message.message_id)
    broker_meta = pb.BrokerEntryMetadata(index=4).SerializeToString()
    tail = struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(broker_meta)) + broker_meta + entry
    [frame] = decode_all(raw_frame(command.SerializeToString(), tail))
    assert frame.entry == entry
    assert not frame.has_checksum


def test_several_frames_in_one_feed_and_partial_tail() -> None:
    stream = commands.ping() + commands.pong() + commands.flow(1, 1000)
    decoder = FrameDecoder()
    decoder.feed(stream + commands.ping()[:5])
    assert [frame.type for frame in decoder] == [T.PING, T.PONG, T.FLOW]
    assert decoder.buffered == 5
    decoder.feed(commands.ping()[5:])
    assert [frame.type for frame in decoder] == [T.PING]
    assert decoder.buffered == 0


def test_byte_by_byte_feeding() -> None:
    data = commands.send(1, 0, make_entry(b"abc" * 50)) + commands.ping()
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for index in range(len(data)):
        decoder.feed(data[index : index + 1])
        frames.extend(decoder)
    assert [frame.type for frame in frames] == [T.SEND, T.PING]


def test_oversized_frame_rejected_after_four_bytes() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.feed(struct.pack(">I", 1025))
    with pytest.raises(RemoteProtocolError, match="frame size 1025"):
        next(decoder)


def test_frame_at_limit_accepted() -> None:
    frame = commands.ping()
    assert decode_all(frame, max_frame_size=len(frame) - 4)[0].type == T.PING
    with pytest.raises(RemoteProtocolError):
        decode_all(frame, max_frame_size=len(frame) - 5)


def test_total_size_below_four_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="frame size 3"):
        decode_all(struct.pack(">I", 3) + b"abc")


def test_command_size_beyond_frame_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="command size"):
        decode_all(struct.pack(">II", 6, 3) + b"\x08\x12")


def test_garbage_command_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="cannot parse"):
        decode_all(raw_frame(b"\xff\xff\xff"))


def test_missing_type_rejected() -> None:
    # An empty BaseCommand would otherwise read back as CONNECT, the enum default.
    with pytest.raises(RemoteProtocolError, match="type"):
        decode_all(raw_frame(b""))


def test_unknown_type_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="type"):
        decode_all(raw_frame(bytes([0x08, 45])))


@pytest.mark.parametrize("command_type", [T.PING, T.SEND, T.CONNECT, T.SUCCESS])
def test_missing_sub_message_rejected(command_type: int) -> None:
    command = pb.BaseCommand(type=command_type)  # type: ignore[arg-type]
    with pytest.raises(RemoteProtocolError, match=SUB_MESSAGE_NAME[command_type]):
        decode_all(raw_frame(command.SerializeToString(), make_entry()))


def test_incomplete_sub_message_rejected() -> None:
    command = pb.BaseCommand(type=T.SEND)
    command.send.producer_id = 1  # sequence_id (required) missing
    with pytest.raises(RemoteProtocolError, match="incomplete"):
        decode_all(raw_frame(command.SerializePartialToString(), make_entry()))


def test_trailing_bytes_after_simple_command_rejected() -> None:
    with pytest.raises(RemoteProtocolError, match="trailing"):
        decode_all(
            raw_frame(pb.BaseCommand.FromString(commands.pong()[8:]).SerializeToString(), b"x")
        )


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"", "metadata size"),
        (b"\x00\x00", "metadata size"),
        (struct.pack(">I", 10) + b"short", "metadata size 10"),
        (struct.pack(">HI", MAGIC_CRC32C, 0) + b"\x00", "metadata size"),
        (struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, 100) + b"x", "broker entry metadata"),
    ],
)
def test_truncated_payload_section_rejected(tail: bytes, message: str) -> None:
    command = pb.BaseCommand(type=T.SEND)
    command.send.producer_id = 1
    command.send.sequence_id = 1
    with pytest.raises(RemoteProtocolError, match=message):
        decode_all(raw_frame(command.SerializeToString(), tail))


def test_decoder_unusable_after_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(raw_frame(b"\xff\xff"))
    with pytest.raises(RemoteProtocolError):
        next(decoder)
    with pytest.raises(RemoteProtocolError, match="unusable"):
        next(decoder)
    with pytest.raises(RemoteProtocolError, match="unusable"):
        decoder.feed(commands.ping())


def test_feed_accepts_memoryview_and_bytearray() -> None:
    decoder = FrameDecoder()
    decoder.feed(memoryview(commands.ping()))
    decoder.feed(bytearray(commands.pong()))
    assert [frame.type for frame in decoder] == [T.PING, T.PONG]


def test_encode_command_rejects_missing_required_field() -> None:
    command = pb.BaseCommand(type=T.ERROR)
    command.error.request_id = 1
    with pytest.raises(LocalProtocolError):
        encode_command(command)


def test_encode_payload_command_requires_metadata_size() -> None:
    command = pb.BaseCommand.FromString(commands.flow(1, 1)[8:])
    with pytest.raises(LocalProtocolError):
        encode_payload_command(command, b"abc")


def test_entry_is_relayed_byte_for_byte() -> None:
    # Stored entry -> MESSAGE -> decode gives exactly the stored bytes back (no re-encoding).
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    metadata.num_messages_in_batch = 2
    entry = encode_entry(metadata, b"\x00\x00\x00\x02\x18\x01a" * 2)
    [sent] = decode_all(commands.send(0, 1, entry))
    assert sent.entry is not None
    [delivered] = decode_all(commands.message(4, MessageId(3, 9), sent.entry))
    assert delivered.entry == entry
    assert delivered.checksum_valid


# --------------------------------------------------------------------------- UTF-8 in strings


def _with_bad_utf8(frame: bytes, good: bytes) -> bytes:
    """``frame`` with the string bytes ``good`` replaced by as many bytes that are not UTF-8."""
    assert frame.count(good) == 1
    return frame.replace(good, b"\xff" * len(good))


@pytest.mark.parametrize(
    "frame",
    [
        commands.lookup("persistent://public/default/xyzzy", 1),
        commands.producer("persistent://public/default/t", 1, 1, producer_name="xyzzy"),
        commands.subscribe("persistent://public/default/t", "xyzzy", 1, 1, 0),
        commands.connect("xyzzy", protocol_version=20),
    ],
    ids=["lookup-topic", "producer-name", "subscription-name", "client-version"],
)
def test_a_string_field_that_is_not_utf8_is_refused(frame: bytes) -> None:
    """proto2 would hand such a field back as bytes; every name the broker keys on is a str."""
    decoder = FrameDecoder()
    decoder.feed(_with_bad_utf8(frame, b"xyzzy"))
    with pytest.raises(RemoteProtocolError, match="not valid UTF-8"):
        list(decoder)


def test_nested_and_repeated_strings_are_checked_too() -> None:
    frame = commands.subscribe(
        "persistent://public/default/t", "s", 1, 1, 0, metadata={"k": "xyzzy"}
    )
    decoder = FrameDecoder()
    decoder.feed(_with_bad_utf8(frame, b"xyzzy"))
    with pytest.raises(RemoteProtocolError, match="'value' is not valid UTF-8"):
        list(decoder)
